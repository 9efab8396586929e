"""What the tests share: helpers, live servers, fakes of the outside world."""
