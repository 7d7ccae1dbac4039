"""The chart's KafkaTopic template is generated from the topic catalog and kept current."""

from __future__ import annotations

from infra.helm import topics
from schemas.topics import catalog


def test_checked_in_template_is_what_the_catalog_makes() -> None:
    assert topics.TEMPLATE.read_text() == topics.render()
    assert topics.main(["--check"]) == 0


def test_every_catalog_topic_and_config_is_in_the_template() -> None:
    text = topics.render()
    for spec in catalog("X."):
        role = spec.name.removeprefix("X.")
        assert f'printf "%s{role}" $prefix' in text
        for key, value in spec.config().items():
            assert f'{key}: "{value}"' in text


def test_a_stale_template_is_reported(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "kafkatopics.yaml"
    stale.write_text(topics.render().replace("retention.ms", "retention.bytes", 1))
    monkeypatch.setattr(topics, "TEMPLATE", stale)
    assert topics.main(["--check"]) == 1
