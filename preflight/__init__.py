"""Preflight's judgement of every host, before any host changes: one probe per host, one judge.

Why a package and not YAML asserts: at 200 hosts each Ansible task costs the controller a fork per
host (about 40 ms each on a 2-core controller), and preflight had 30 of them per host, three of them
remote. Now a host answers one shell probe (``probe.SCRIPT``, run with ``ansible.builtin.raw``: one
SSH round trip, no Python on the host), and the ``rollout_preflight`` action plugin
(plugins/action) judges every host at once on the controller with the rules in ``rules.py``. Each
rule reads alone, returns a refusal that names the variable and the fix, or nothing.
"""

from . import gpu_facts, rules, settings, specs
from .gpu_facts import SmiLog, parse_q, parse_query
from .probe import SCRIPT, HostProbe, Section, parse_probe
from .rules import RULES, Refusal, Settings, group_refusals, judge_host, unknown_variables
from .settings import representatives, settings_key
from .specs import Specs

__all__ = [
    "RULES",
    "SCRIPT",
    "HostProbe",
    "Refusal",
    "Section",
    "Settings",
    "SmiLog",
    "Specs",
    "gpu_facts",
    "group_refusals",
    "judge_host",
    "parse_probe",
    "parse_q",
    "parse_query",
    "representatives",
    "rules",
    "settings",
    "settings_key",
    "specs",
    "unknown_variables",
]
