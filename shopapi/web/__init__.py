"""What handlers answer with: lists and cursors, ETags, versioned representations, money, problems,
JSON."""
