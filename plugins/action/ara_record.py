"""ARA's ``ara_record`` action (ara 1.8.0), on this bundle's action path: the rollout records each
host's gate verdict with it while ARA recording is on (plugins/callback/sglang_ara.py)."""

from ara.plugins.action.ara_record import DOCUMENTATION, EXAMPLES, RETURN, ActionModule

__all__ = ["DOCUMENTATION", "EXAMPLES", "RETURN", "ActionModule"]
