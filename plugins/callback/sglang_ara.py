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

from ara.plugins.callback import ara_default

# ARA's options (api_client, api_server, ...: env ARA_*, ansible.cfg [ara]); Ansible reads them from
# the module's DOCUMENTATION under this plugin's name
DOCUMENTATION = ara_default.DOCUMENTATION.replace("callback: ara\n", "callback: sglang_ara\n", 1)


class CallbackModule(ara_default.CallbackModule):  # type: ignore[misc]
    CALLBACK_NAME = "sglang_ara"
    CALLBACK_NEEDS_ENABLED = True  # off unless callbacks_enabled names it
