"""Records every run in ARA (ARA Records Ansible, ara 1.8.0), when switched on.

Why a callback of our own: ARA's callback (``ara_default``) records every run as soon as its folder
is on the callback path, and putting it there replaces this bundle's own callback path
(ansible.cfg's ``callback_plugins``, where ``rollout_lost`` lives). This is ARA's callback under
another name, off until enabled, so recording is one switch:

    ANSIBLE_CALLBACKS_ENABLED=sglang_ara ansible-playbook deploy.yml
    (or ``callbacks_enabled = sglang_ara`` under [defaults] in ansible.cfg)

Where it records is ARA's own setting: its local sqlite database by default
(``~/.ara/server/ansible.sqlite``, moved with ``ARA_BASE_DIR``), an ARA server with
``ARA_API_CLIENT=http`` and ``ARA_API_SERVER=https://ara.example:8000`` (or ``[ara] api_client`` and
``api_server`` in ansible.cfg). The rollout adds each host's gate verdict as an ARA record
(``ara_record``, playbooks/tasks/record_host.yml) while this callback is enabled. docs/monitoring.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ara.plugins.callback import ara_default

# ARA's options (api_client, api_server, ...: env ARA_*, ansible.cfg [ara]); Ansible reads them from
# the module's DOCUMENTATION under this plugin's name
DOCUMENTATION = ara_default.DOCUMENTATION.replace("callback: ara\n", "callback: sglang_ara\n", 1)


def finite(value: Any) -> Any:
    """``value`` with every infinite or NaN float as its text ("inf", "nan"). JSON has neither, and
    ARA's API (Django REST framework, strict JSON) answers 400 to a payload that holds one, so ARA
    logs an error and the whole task result is lost: e.g. every task that carries the gate config,
    whose ``throughput.request_rate`` is ``.inf`` (validate/configs/*.yml)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _finite_payload(send: Any, endpoint: str, **payload: Any) -> Any:
    return send(endpoint, **finite(payload))


class CallbackModule(ara_default.CallbackModule):  # type: ignore[misc]
    CALLBACK_NAME = "sglang_ara"
    CALLBACK_NEEDS_ENABLED = True  # off unless callbacks_enabled names it

    def set_options(self, *args: Any, **kwargs: Any) -> None:
        super().set_options(*args, **kwargs)
        # the client ARA's callback (and ara_record, through ARA's active client) sends with
        for method in ("post", "patch", "put"):
            setattr(self.client, method, functools.partial(_finite_payload, getattr(self.client, method)))
