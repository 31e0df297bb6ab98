"""The rules config: packaged defaults, per-key overrides, and one-line errors naming the key."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from trainwatch.rules import RULE_IDS, ConfigError, RuleEngine, load_rules_config
from trainwatch.rules.config.models import RULE_MODELS


def write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_load_and_cover_every_key() -> None:
    cfg = load_rules_config()
    assert set(cfg.rules) == set(RULE_IDS)
    packaged = yaml.safe_load(resources.files("trainwatch.configs").joinpath("rules.yaml")
                              .read_text())
    for rid, model in RULE_MODELS.items():
        names = {f.name for f in dataclasses.fields(model)}
        assert set(packaged[rid]) == names, rid  # every key set in the YAML, none unknown
        assert cfg.rules[rid].enabled is True
    assert cfg.loss_spike.z_threshold == 6.0
    assert cfg.custom == ()


def test_rule_ids_are_stable() -> None:
    assert RULE_IDS == (
        "nan_inf", "loss_spike", "grad_explosion", "grad_vanishing", "learning_stalled",
        "plateau", "divergence", "overfit", "lr_exhausted", "stalled_stream",
        "step_time_outlier", "throughput_drop", "memory_growth", "state_detach",
        "rank_straggler", "console_error", "run_crashed",
    )


def test_user_file_overrides_per_key(tmp_path: Path) -> None:
    f = write(tmp_path, "loss_spike:\n  z_threshold: 8\n  min_ratio: '1.5'\nplateau: false\n"
                        "overfit:\n  min_delta: 1e-3\n")
    cfg = load_rules_config(f)
    assert cfg.loss_spike.z_threshold == 8.0
    assert cfg.loss_spike.min_ratio == 1.5  # a numeric string is a number
    assert cfg.loss_spike.window == 128  # untouched keys keep the packaged value
    assert cfg.plateau.enabled is False  # `rule: false` turns a rule off
    assert cfg.overfit.min_delta == 1e-3  # PyYAML reads 1e-3 as a string: still a number
    assert cfg.sources[-1] == str(f)
    assert "plateau" not in {r.id for r in RuleEngine(cfg)._rules}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("loss_spike:\n  z_threshold: abc\n",
         "rules.yaml: loss_spike.z_threshold: expected a number > 0, got 'abc'"),
        ("loss_spike:\n  z_threshold: -1\n",
         "rules.yaml: loss_spike.z_threshold: expected a number > 0, got -1"),
        ("loss_spike:\n  window: 2.5\n",
         "rules.yaml: loss_spike.window: expected an integer >= 8, got 2.5"),
        ("loss_spike:\n  zthreshold: 3\n", "rules.yaml: loss_spike.zthreshold: unknown key"),
        ("nan_inf:\n  severity: fatal\n",
         "rules.yaml: nan_inf.severity: expected one of info, warning, error, got 'fatal'"),
        ("nan_inf:\n  roles: [loss, acc]\n", "rules.yaml: nan_inf.roles: expected a list of roles"),
        ("nan_inf:\n  enabled: maybe\n",
         "rules.yaml: nan_inf.enabled: expected true or false, got 'maybe'"),
        ("grad_vanishing:\n  ratio: 2\n",
         "rules.yaml: grad_vanishing.ratio: expected a number > 0 and < 1, got 2"),
        ("stalled_stream:\n  end_events: 3\n",
         "rules.yaml: stalled_stream.end_events: expected a list of event names, got 3"),
        ("divergence:\n  cap: high\n",
         "rules.yaml: divergence.cap: expected null or a number, got 'high'"),
        ("spikes:\n  z: 1\n", "rules.yaml: spikes: unknown key (expected a rule id"),
        ("plateau: 3\n", "rules.yaml: plateau: expected a mapping of settings"),
        ("- a\n- b\n", "rules.yaml: expected a mapping of rule ids to settings, got list"),
        ("roles:\n  accuracy: [acc]\n", "rules.yaml: roles.accuracy: unknown role"),
        ("roles:\n  loss: 3\n", "rules.yaml: roles.loss: expected a list of metric names"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_rules_config(f)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.replace(str(tmp_path) + "/", "").startswith(message), msg


def test_every_rule_rejects_an_unknown_key_and_a_bad_value(tmp_path: Path) -> None:
    for rid, model in RULE_MODELS.items():
        with pytest.raises(ConfigError, match=rf"{rid}\.nope: unknown key"):
            load_rules_config(overrides={rid: {"nope": 1}})
        numeric = [f.name for f in dataclasses.fields(model)
                   if f.metadata["check"].kind in ("number", "integer")]
        key = numeric[0] if numeric else "severity"  # (run_crashed has no number to set)
        with pytest.raises(ConfigError, match=rf"<overrides>: {rid}\.{key}: expected"):
            load_rules_config(overrides={rid: {key: "x"}})


def test_keys_that_do_not_go_together_name_the_file_that_set_them(tmp_path: Path) -> None:
    # the spike detector keeps `window` points: a longer recent level is refused, naming the
    # file that set it; raising the window with it is fine
    f = write(tmp_path, "step_time_outlier:\n  recent_points: 200\n")
    with pytest.raises(ConfigError, match=r"rules\.yaml: step_time_outlier\.recent_points: must "
                       r"be at most window \(128\), got 200$"):
        load_rules_config(f)
    ok = load_rules_config(f, overrides={"step_time_outlier": {"window": 256}})
    assert ok.rules["step_time_outlier"].recent_points == 200
    # the file that made the pair clash is named: here the later one, lowering the window
    g = write(tmp_path, "step_time_outlier:\n  recent_points: 100\n", "mine.yaml")
    with pytest.raises(ConfigError, match=r"^<overrides>: step_time_outlier\.recent_points"):
        load_rules_config(g, overrides={"step_time_outlier": {"window": 64}})


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    f = write(tmp_path, "loss_spike:\n  z_threshold: 6\n  window: [1, 2\nplateau: {}\n")
    with pytest.raises(ConfigError) as e:
        load_rules_config(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}:") and "invalid YAML" in msg and "\n" not in msg
    line = int(msg.split(":")[1])
    assert 3 <= line <= 4


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_rules_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00loss")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_rules_config(bad)


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert load_rules_config(write(tmp_path, "# nothing\n")).rules == load_rules_config().rules


def test_custom_rules(tmp_path: Path) -> None:
    f = write(tmp_path, """
custom:
  - id: loss_too_high
    metric: loss
    above: 10
    for_steps: 5
    message: "loss {value} above {threshold} since {since}"
  - {id: lr_low, metric: train/lr, below: 1e-7, severity: error}
""")
    cfg = load_rules_config(f)
    a, b = cfg.custom
    assert (a.id, a.metric, a.above, a.below, a.for_steps, a.severity) == (
        "loss_too_high", "loss", 10.0, None, 5, "warning")
    assert (b.below, b.severity, b.for_steps) == (1e-7, "error", 1)
    assert "loss_too_high" in cfg.ids()


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("{id: x, metric: loss}", "custom[0]: needs 'above' or 'below'"),
        ("{id: Bad-Id, metric: loss, above: 1}", "custom[0].id: expected a lower-case id"),
        ("{id: loss_spike, metric: loss, above: 1}", "custom[0].id: 'loss_spike' is already a rule id"),
        ("{id: x, metric: loss, above: lots}", "custom[0].above: expected null or a number"),
        ("{id: x, metric: loss, above: 1, for_steps: 0}", "custom[0].for_steps: expected an integer >= 1"),
        ("{id: x, metric: loss, above: 1, when: now}", "custom[0].when: unknown key"),
        ("{id: x, above: 1}", "custom[0].metric: expected a metric name"),
        ("{id: x, metric: loss, above: 1, message: 'at {valu}'}",
         "custom[0].message: unknown field {valu} (known: {metric}, {value}"),
        ("{id: x, metric: loss, above: 1, message: 'at {value'}", "custom[0].message: "),
        ("{id: x, metric: loss, above: 1, message: 'at {value:.2f}'}",
         "custom[0].message: .*{value} and {threshold} come as text"),
    ],
)
def test_custom_rule_errors(tmp_path: Path, item: str, message: str) -> None:
    f = write(tmp_path, f"custom:\n  - {item}\n")
    pattern = ".*".join(re.escape(part) for part in message.split(".*"))  # literal, but ".*"
    with pytest.raises(ConfigError, match=pattern):
        load_rules_config(f)


def test_duplicate_custom_ids(tmp_path: Path) -> None:
    f = write(tmp_path, "custom:\n  - {id: a, metric: loss, above: 1}\n"
                        "  - {id: a, metric: loss, below: 0}\n")
    with pytest.raises(ConfigError, match=r"custom\[1\]\.id: 'a' is already a rule id"):
        load_rules_config(f)


def test_roles_extension(tmp_path: Path) -> None:
    cfg = load_rules_config(write(tmp_path, "roles:\n  loss: [my_objective]\n  grad_norm: gn\n"))
    assert cfg.roles.role_of("my_objective") == "loss"
    assert cfg.roles.role_of("gn") == "grad_norm"
    assert cfg.roles.resolve(["loss", "my_objective"])["loss"] == "my_objective"
    assert cfg.extra_roles == {"loss": ("my_objective",), "grad_norm": ("gn",)}


def test_every_message_field_the_config_allows_is_filled_in(tmp_path: Path) -> None:
    """The fields the file is checked against are those the rule fills (one list of names)."""
    from trainwatch.formats.jsonl import JsonlParser
    from trainwatch.rules import RuleEngine
    from trainwatch.rules.config.loading import MESSAGE_FIELDS

    template = " ".join(f"{k}={{{k}}}" for k in MESSAGE_FIELDS)
    f = write(tmp_path, f"custom:\n  - {{id: x, metric: loss, above: 1, message: '{template}'}}\n")
    engine = RuleEngine(load_rules_config(f), live=False)
    engine.feed(JsonlParser("m.jsonl", clock=lambda: 0.0).parse(b'{"step": 3, "loss": 2.5}\n'))
    (alert,) = [a for a in engine.alerts if a.rule == "x"]
    assert alert.message == "metric=loss value=2.5 threshold=1 step=3 since=3 for_steps=1"
