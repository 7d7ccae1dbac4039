"""Settings are grouped, and every flat ``RS_*`` name still reads, sets and names its setting."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from schemas.codec import problems_of
from schemas.settings import KafkaSettings, Settings, env_name, flat_names


def flat(settings: Settings, name: str) -> object:
    """The flat attribute ``name`` (run time only: typed code reads the group)."""
    return getattr(settings, name)


def test_every_flat_environment_name_sets_its_grouped_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings()
    for name, (group, field) in flat_names().items():
        value = getattr(defaults, name)
        assert value == getattr(getattr(defaults, group), field), name
    monkeypatch.setenv("RS_TOPIC_PREFIX", "env.")
    monkeypatch.setenv("rs_kafka_bootstrap", "10.0.0.1:9092")  # any case, as pydantic-settings reads them
    monkeypatch.setenv("RS_WORKER_STORE_ARTIFACTS", "false")
    monkeypatch.setenv("RS_S3_SECRET_KEY", "s3cret")
    monkeypatch.setenv("RS_CACHE_DIR", "/tmp/rs-cache")
    settings = Settings()
    assert (settings.kafka.topic_prefix, flat(settings, "topic_prefix")) == ("env.", "env.")
    assert settings.kafka.bootstrap == flat(settings, "kafka_bootstrap") == "10.0.0.1:9092"
    assert settings.worker.store_artifacts is False
    assert flat(settings, "s3_secret_key") == SecretStr("s3cret")
    assert str(settings.tasks_dir) == "/tmp/rs-cache/tasks"  # derived from the group's cache_dir
    assert settings.kafka_client_config()["bootstrap.servers"] == "10.0.0.1:9092"


def test_flat_keywords_and_copies_update_their_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RS_KAFKA_BOOTSTRAP", "env:1")
    settings = Settings(topic_prefix="kw.", topic_partitions=3)  # keywords win over the environment, per field
    assert (settings.kafka.topic_prefix, settings.kafka.topic_partitions, settings.kafka.bootstrap) == (
        "kw.",
        3,
        "env:1",
    )
    copy = settings.model_copy(update={"sandbox_pool_size": 0, "s3_secret_key": SecretStr("x")})
    assert (copy.sandbox.pool_size, flat(copy, "sandbox_pool_size"), copy.s3.secret_key.get_secret_value()) == (
        0,
        0,
        "x",
    )
    assert flat(settings, "sandbox_pool_size") == 4  # the original is untouched
    grouped = Settings(kafka=KafkaSettings(topic_prefix="g."))
    assert flat(grouped, "topic_prefix") == "g."


def test_a_bad_value_is_named_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RS_TOPIC_PARTITIONS", "0")
    with pytest.raises(ValidationError) as caught:
        Settings()
    path, _problem = problems_of(caught.value)[0]
    assert env_name(path) == "RS_TOPIC_PARTITIONS"
    assert env_name("tasks_dir") == "RS_TASKS_DIR"


def test_each_setting_is_declared_once_in_its_group() -> None:
    """The flat names are derived from the groups' fields, one each, none shared; a name the groups do not
    declare is no attribute."""
    names = flat_names()
    assert len(names) == len(set(names.values())) == 86
    assert names["kafka_bootstrap"] == ("kafka", "bootstrap")
    assert names["topic_prefix"] == ("kafka", "topic_prefix")
    assert names["docker_host"] == ("sandbox", "docker_host")
    assert names["cache_dir"] == ("local", "cache_dir")
    assert names["ca_certificates_dir"] == ("local", "ca_certificates_dir")
    with pytest.raises(AttributeError):
        flat(Settings(), "kafka_topic_prefix")


def test_a_misspelt_setting_is_named_with_the_setting_meant() -> None:
    from schemas.settings import unknown_variables

    said = unknown_variables({"RS_SANDBOX_DOCKER_HOST": "x", "RS_KAFKA_BOOTSRAP": "y", "RS_DEBUG": "1",
                              "RS_TASKS_DIR": "/t", "RS_DOCKER_HOST": "unix:///d", "HOME": "/root",
                              "RS_ZZZ": "1"})  # fmt: skip
    assert said == [
        "RS_KAFKA_BOOTSRAP is no setting of rewardstream and is ignored (did you mean RS_KAFKA_BOOTSTRAP?)",
        "RS_SANDBOX_DOCKER_HOST is no setting of rewardstream and is ignored (did you mean RS_DOCKER_HOST?)",
        "RS_ZZZ is no setting of rewardstream and is ignored",
    ]
