"""The rule engine and the built-in rules: live diagnosis of training faults.

    from trainwatch.rules import RuleEngine, load_rules_config
    engine = RuleEngine(load_rules_config(), live=True)
    for alert in engine.feed(batch): ...

This package never imports textual, rich, plotext or torch.
"""

from __future__ import annotations

from trainwatch.rules.alert import SEVERITY_RANK, Alert, Cause, Severity
from trainwatch.rules.config import CustomRuleConfig, RulesConfig, load_rules_config
from trainwatch.rules.engine import RuleEngine
from trainwatch.rules.models import RULE_IDS
from trainwatch.rules.schema import ConfigError

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
