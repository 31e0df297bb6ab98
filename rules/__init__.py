"""The rule engine and the built-in rules: live diagnosis of training faults.

    from trainwatch.rules import RuleEngine, load_rules_config
    engine = RuleEngine(load_rules_config(), live=True)
    for alert in engine.feed(batch): ...

This package never imports textual, rich, plotext or torch.
"""

from __future__ import annotations

from trainwatch.rules.config.loading import CustomRuleConfig, RulesConfig, load_rules_config
from trainwatch.rules.config.models import RULE_IDS
from trainwatch.rules.config.schema import ConfigError
from trainwatch.rules.engine.alert import SEVERITY_RANK, Alert, Cause, Severity
from trainwatch.rules.engine.engine import RuleEngine

__all__ = [
    "RULE_IDS",
    "SEVERITY_RANK",
    "Alert",
    "Cause",
    "ConfigError",
    "CustomRuleConfig",
    "RuleEngine",
    "RulesConfig",
    "Severity",
    "load_rules_config",
]
