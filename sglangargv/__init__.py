"""SGLang's command line from the ``sglang_server_*`` settings: the rules and the renderer.

One room for it: ``settings`` says what each setting may hold (static rules, run in preflight
before any host changes), ``render`` turns the settings into the ``launch_server`` argv and the
environment switches for one SGLang release, image patch record and GPU arch, checked against
that release's flag table (``sglangflags``). The Ansible filter ``plugins/filter/sglang_flags.py``
only hands the role's variables to these functions; the tests import them from here.

Controller-side only (the roles render on the controller); stdlib plus ``sglangflags``.
"""

from .render import GUARD_FIX, PCIE_IPC_ENV, Rendered, check, deprecations, env_strings, parse_version, render_argv
from .settings import MANAGED_FLAGS, PREFIX, check_settings

__all__ = [
    "GUARD_FIX",
    "MANAGED_FLAGS",
    "PCIE_IPC_ENV",
    "PREFIX",
    "Rendered",
    "check",
    "check_settings",
    "deprecations",
    "env_strings",
    "parse_version",
    "render_argv",
]
