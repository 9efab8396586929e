"""Reading a /metrics scrape."""

from prometheus_client.parser import text_string_to_metric_families


def sample_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 if none)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def label_values(text: str, label: str) -> set[str]:
    """Every value the label called `label` takes in any sample."""
    return {
        sample.labels[label]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if label in sample.labels
    }
