"""The wave planner (preflight/waves.py) and the rule of its settings (preflight/rules.py, Share):
exact waves for a fleet of 2 B200 and 8 RTX PRO 6000 hosts, Ansible's rounding of percentages, a
cap never below one host, a profile of one host, and the errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

import preflight
from preflight import waves
from preflight.rules import Share, parse_serial, parse_share, share_errors

REPO = Path(__file__).resolve().parents[2]
SPECS = preflight.specs.load(REPO / "roles")
# inventory order of the example inventory's shape: the RTX group first, then the B200s
FLEET = [f"r{i}" for i in range(1, 9)] + ["b1", "b2"]
CANARIES = ["r1", "b1"]


def _settings(cap: object, serial: object = (1, 5, "25%"), hosts: list[str] = FLEET) -> dict:
    """Each host's typed rollout settings: names starting with b are B200s, the others RTX PRO 6000."""
    return {
        h: {
            "sglang_rollout_serial": list(serial) if isinstance(serial, tuple) else serial,
            "sglang_rollout_max_fail_percentage": 0,
            "sglang_rollout_max_out_per_profile": cap,
            "sglang_gate_baseline_group": "b200" if h.startswith("b") else "rtx",
        }
        for h in hosts
    }


def test_cap_of_one_host_per_profile_takes_one_of_each_profile_per_wave():
    plan = waves.plan(FLEET, _settings(1), CANARIES)
    # wave 1 (size 1): r2; wave 2 (size 5): one RTX and the other B200; then 25 % of 10 = 2, capped to one RTX
    assert plan.waves == [["r2"], ["r3", "b2"], ["r4"], ["r5"], ["r6"], ["r7"], ["r8"]]
    assert plan.sizes == [1, 2, 1, 1, 1, 1, 1]
    assert plan.caps == {"rtx": 1, "b200": 1} and plan.profile_hosts == {"rtx": 8, "b200": 2}


def test_cap_of_half_a_profile():
    plan = waves.plan(FLEET, _settings("50%"), CANARIES)
    # RTX: 50 % of 8 = 4; B200: 50 % of 2 = 1; wave 2 (size 5) is full after 4 RTX and the B200
    assert plan.waves == [["r2"], ["r3", "r4", "r5", "r6", "b2"], ["r7", "r8"]]
    assert plan.caps == {"rtx": 4, "b200": 1}
    assert plan.as_dict()["per_wave"] == [{"rtx": 1}, {"rtx": 4, "b200": 1}, {"rtx": 2}]


def test_default_cap_of_the_example_inventory():
    plan = waves.plan(FLEET, _settings("25%"), CANARIES)
    # 25 % of 8 RTX = 2; 25 % of 2 B200 = 0.5, rounded down to 0, read as 1: never the whole profile
    assert plan.caps == {"rtx": 2, "b200": 1}
    assert plan.waves == [["r2"], ["r3", "r4", "b2"], ["r5", "r6"], ["r7", "r8"]]
    assert plan.describe() == [
        "Waves after the canaries: 4 (sglang_rollout_serial 1, 5, 25% of 10 hosts; at most per GPU profile, "
        "sglang_rollout_max_out_per_profile: rtx 2 of 8, b200 1 of 2)",
        "wave 1: r2 (rtx 1)",
        "wave 2: r3, r4, b2 (rtx 2, b200 1)",
        "wave 3: r5, r6 (rtx 2)",
        "wave 4: r7, r8 (rtx 2)",
    ]


def test_without_a_cap_worth_the_name_the_waves_are_ansibles_serial_batches():
    plan = waves.plan(FLEET, _settings("100%"), CANARIES)
    # what Ansible's serial [1, 5, "25%"] makes of the 8 wave hosts in inventory order
    assert plan.waves == [["r2"], ["r3", "r4", "r5", "r6", "r7"], ["r8", "b2"]]


def test_a_host_that_waits_goes_ahead_of_the_hosts_behind_it():
    # r3 does not fit wave 1 (one RTX already): it leads wave 2, before r4
    assert waves.plan_waves([("r2", "rtx"), ("r3", "rtx"), ("b2", "b200"), ("r4", "rtx")],
                            [Share(count=3)], {"rtx": 1, "b200": 1}, 6) == [["r2", "b2"], ["r3"], ["r4"]]  # fmt: skip


def test_serial_percentages_round_down_as_ansible_and_are_at_least_one():
    hosts = [(f"h{i}", "p") for i in range(7)]
    # 30 % of 7 = 2.1 -> 2; 10 % of 7 = 0.7 -> 0 -> 1 (Ansible's pct_to_int)
    assert [len(w) for w in waves.plan_waves(hosts, [Share(percent=30)], {"p": 7}, 7)] == [2, 2, 2, 1]
    assert [len(w) for w in waves.plan_waves(hosts, [Share(percent=10)], {"p": 7}, 7)] == [1] * 7
    assert Share(percent=25).of(10) == 2 and Share(percent=25).of(2) == 1 and Share(percent=100).of(3) == 3
    assert Share(count=3).of(1) == 3


def test_a_cap_below_one_host_is_one():
    assert waves.plan_waves([("a", "p"), ("b", "p")], [Share(count=5)], {"p": 0}, 2) == [["a"], ["b"]]
    plan = waves.plan(["r1", "r2", "r3"], _settings("1%", hosts=["r1", "r2", "r3"]), ["r1"])
    assert plan.caps == {"rtx": 1} and plan.waves == [["r2"], ["r3"]]


def test_a_profile_of_one_host_is_its_canary_and_in_no_wave():
    hosts = ["r1", "r2", "r3", "b1"]
    plan = waves.plan(hosts, _settings("50%", hosts=hosts), ["r1", "b1"])
    assert plan.waves == [["r2"], ["r3"]] and plan.caps == {"rtx": 1, "b200": 1}
    # without its canary (pending repair, say) the lone host still goes, alone of its profile
    plan = waves.plan(hosts, _settings(1, serial=(4,), hosts=hosts), [])
    assert plan.waves == [["r1", "b1"], ["r2"], ["r3"]]


def test_pending_and_canaries_are_left_out_but_counted_in_percentages():
    plan = waves.plan(FLEET, _settings("100%", serial=("50%",)), ["r1", "b1", "r5"])
    # 50 % of the run's 10 hosts = 5 per wave, over the 7 left
    assert plan.waves == [["r2", "r3", "r4", "r6", "r7"], ["r8", "b2"]]
    assert plan.as_dict()["hosts"] == ["r2", "r3", "r4", "r6", "r7", "r8", "b2"]
    assert plan.as_dict()["sizes"] == [5, 2]


def test_a_host_out_of_rotation_since_an_earlier_run_goes_first_and_counts_against_its_cap():
    plan = waves.plan(FLEET, _settings(1), CANARIES, out={"r5": "gate failed, no last good config"})
    # r5 is out already: the first wave is r5 alone (size 1), and no other RTX host goes while it waits
    assert plan.waves == [["r5"], ["r2", "b2"], ["r3"], ["r4"], ["r6"], ["r7"], ["r8"]]
    assert plan.out_first == {"r5": "gate failed, no last good config"} and plan.as_dict()["out_first"] == ["r5"]
    assert "out of rotation since an earlier run, first in the waves: r5 (gate failed, no last good config)" in (
        plan.describe()
    )


def test_more_hosts_out_than_the_cap_take_no_other_host_of_their_profile_out_until_they_went():
    plan = waves.plan(FLEET, _settings(1, serial=(5,)), CANARIES, out={"r6": "", "r4": ""})
    # both out (run order: r4, r6): one per wave, as the cap says, then the rest; the B200 is not held back
    assert plan.waves == [["r4", "b2"], ["r6"], ["r2"], ["r3"], ["r5"], ["r7"], ["r8"]]
    assert list(plan.out_first) == ["r4", "r6"]


def test_a_host_out_of_rotation_that_a_canary_or_repair_play_rolls_is_in_no_wave():
    plan = waves.plan(FLEET, _settings(2), ["r3", "b1"], out={"r3": "", "x9": ""})  # r3 a canary, x9 not in the run
    assert plan.out_first == {} and all("r3" not in w for w in plan.waves)
    assert plan.waves[0] == ["r1"] and "out of rotation" not in " ".join(plan.describe())


def test_what_the_plays_and_the_summary_read_of_a_plan():
    """The dict preflight keeps on the controller (sglang_rollout_waves): the wave play's serial and
    host order, max_fail_percentage, and what the summary prints. The last serial size repeats."""
    settings = _settings("50%", serial=(1, "20%"))
    for values in settings.values():
        values["sglang_rollout_max_fail_percentage"] = 20
    plan = waves.plan(FLEET, settings, CANARIES, out={"r7": ""})
    assert plan.as_dict() == {
        "waves": [["r7"], ["r2", "r3"], ["r4", "r5"], ["r6", "r8"], ["b2"]],
        "sizes": [1, 2, 2, 2, 1],
        "hosts": ["r7", "r2", "r3", "r4", "r5", "r6", "r8", "b2"],
        "serial": [1, "20%"],
        "max_fail_percentage": 20,
        "caps": {"rtx": 4, "b200": 1},
        "profile_hosts": {"rtx": 8, "b200": 2},
        "per_wave": [{"rtx": 1}, {"rtx": 2}, {"rtx": 2}, {"rtx": 2}, {"b200": 1}],
        "out_first": ["r7"],
        "text": [
            "Waves after the canaries: 5 (sglang_rollout_serial 1, 20% of 10 hosts; at most per GPU profile, "
            "sglang_rollout_max_out_per_profile: rtx 4 of 8, b200 1 of 2)",
            "out of rotation since an earlier run, first in the waves: r7",
            "wave 1: r7 (rtx 1)", "wave 2: r2, r3 (rtx 2)", "wave 3: r4, r5 (rtx 2)", "wave 4: r6, r8 (rtx 2)",
            "wave 5: b2 (b200 1)",
        ],
    }  # fmt: skip
    # a serial of one size repeats it: 3 at a time
    assert waves.plan(FLEET, _settings("100%", serial=(3,)), CANARIES).sizes == [3, 3, 2]


def test_a_run_with_no_hosts_has_no_waves():
    plan = waves.plan([], {})
    assert (plan.waves, plan.sizes, plan.as_dict()["hosts"], plan.max_fail_percentage) == ([], [], [], 0)


def test_serial_must_be_one_value_for_the_run():
    settings = _settings(1)
    settings["b2"]["sglang_rollout_serial"] = [2]
    with pytest.raises(ValueError) as err:
        waves.plan(FLEET, settings, CANARIES)
    assert str(err.value) == (
        "sglang_rollout_serial must be one value for the whole run, the hosts hold [1, 5, '25%'] on r1, r2, r3, r4 "
        "and more; [2] on b2: set it once for them"
    )


def test_max_fail_must_be_one_value_and_a_bad_cap_names_the_variable():
    settings = _settings(1, hosts=["r1", "r2", "r3", "r4"])
    settings["r4"]["sglang_rollout_max_fail_percentage"] = 10
    with pytest.raises(ValueError) as err:
        waves.plan(["r1", "r2", "r3", "r4"], settings, ["r1"])
    assert str(err.value) == (
        "sglang_rollout_max_fail_percentage must be one value for the whole run, the hosts hold 0 on r1, r2, r3; "
        "10 on r4: set it once for them"
    )
    settings = _settings("half", hosts=["x1", "x2"])
    for h in settings:
        settings[h]["sglang_gate_baseline_group"] = None  # no profile
    with pytest.raises(ValueError, match=r"^sglang_rollout_max_out_per_profile: 'half' is not a count of hosts"):
        waves.plan(["x1", "x2"], settings, ["x1"])


def test_the_cap_is_one_value_per_profile_and_may_differ_between_profiles():
    settings = _settings(1)
    for h in ("b1", "b2"):
        settings[h]["sglang_rollout_max_out_per_profile"] = "100%"
    assert waves.plan(FLEET, settings, CANARIES).caps == {"rtx": 1, "b200": 2}
    settings["b1"]["sglang_rollout_max_out_per_profile"] = 1
    with pytest.raises(ValueError, match=r"^sglang_rollout_max_out_per_profile must be one value for GPU profile b200"):
        waves.plan(FLEET, settings, CANARIES)


@pytest.mark.parametrize(
    ("value", "share"),
    [(3, Share(count=3)), ("3", Share(count=3)), ("25%", Share(percent=25)), ("100%", Share(percent=100))],
)
def test_share_values(value, share):
    assert parse_share(value, "sglang_rollout_max_out_per_profile") == share


@pytest.mark.parametrize("value", [0, -1, "0%", "101%", "12.5%", "a quarter", True, None, [1], "%", 2.5])
def test_share_refusals_name_the_variable_and_the_allowed_values(value):
    with pytest.raises(ValueError) as err:
        parse_share(value, "sglang_rollout_max_out_per_profile")
    assert str(err.value) == (
        f"sglang_rollout_max_out_per_profile: {value!r} is not a count of hosts (a positive integer: 2) "
        'or a percentage ("1%" to "100%")'
    )


def test_serial_values_and_refusals():
    assert parse_serial([1, "5", "25%"]) == [Share(count=1), Share(count=5), Share(percent=25)]
    assert parse_serial("50%") == [Share(percent=50)]
    for bad in ([], [1, "x"], [0]):
        with pytest.raises(ValueError, match=r"^sglang_rollout_serial: .* is not a count of hosts .*or a list of them"):
            parse_serial(bad)


def test_preflight_refuses_a_bad_cap_or_serial_and_defaults_the_unset():
    """Settings.from_vars (the judge's per-host read) names the variable; unset, the defaults of
    preflight/variables.yml apply and pass."""
    _, errors = preflight.Settings.from_vars({"sglang_rollout_max_out_per_profile": "half"}, SPECS)
    assert errors == [
        "sglang_rollout_max_out_per_profile: 'half' is not a count of hosts (a positive integer: 2) "
        'or a percentage ("1%" to "100%")'
    ]
    _, errors = preflight.Settings.from_vars({"sglang_rollout_serial": [1, "0%"]}, SPECS)
    assert errors == [
        "sglang_rollout_serial: '0%' is not a count of hosts (a positive integer: 2) or a percentage "
        '("1%" to "100%"), or a list of them ([1, 5, "25%"]; the last repeats)'
    ]
    values, errors = SPECS.typed({}, waves.SETTINGS)
    assert errors == [] and share_errors(values) == []
    assert values == {
        "sglang_rollout_serial": [1, 5, "25%"],
        "sglang_rollout_max_fail_percentage": 0,
        "sglang_rollout_max_out_per_profile": "25%",
    }
