"""The rollout's host records and summary: one schema, one writer.

Every record of a host in a run (in progress at a stage, finished, lost when the host became
unreachable) and the run's summary are built here and written atomically. The rollout's tasks call
the ``rollout_record`` and ``rollout_summary`` action plugins (plugins/action), the
``rollout_lost`` callback calls the same functions when Ansible itself stops the run; the
next run's preflight and the tests read what these wrote. Before, the same record was spelt out
in three task files and a callback, and the copies drifted apart (the lost record had no image ID).
Every real record is also folded into the fleet state file (state.py), which the next run reads.
"""

from .history import prune_runs
from .metrics import metrics_path, write_fleet_metrics
from .records import (
    VARIABLES,
    HostRecord,
    HostVars,
    final,
    in_progress,
    lost,
    mark_lost,
    read_record,
    record_path,
    stage_durations,
    write_record,
)
from .state import (
    drained_hosts,
    finish_run,
    lost_runs,
    merge_record,
    out_of_rotation,
    pending_hosts,
    read_state,
    set_rotation,
    state_path,
)
from .summary import read_records, summarize, write_summary

__all__ = [
    "VARIABLES",
    "HostRecord",
    "HostVars",
    "drained_hosts",
    "final",
    "finish_run",
    "in_progress",
    "lost",
    "lost_runs",
    "mark_lost",
    "merge_record",
    "metrics_path",
    "out_of_rotation",
    "pending_hosts",
    "prune_runs",
    "read_record",
    "read_records",
    "read_state",
    "record_path",
    "set_rotation",
    "stage_durations",
    "state_path",
    "summarize",
    "write_fleet_metrics",
    "write_record",
    "write_summary",
]
