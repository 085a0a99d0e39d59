"""Checks amk-opt --emit=gantt against the program it was written for:
one slice per task on its SM's track, a track's slices never overlap, a
task starts no earlier than every producer it waits on has ended (plus the
cross-SM hop when the producer ran elsewhere), and a "wait" slice fills each
gap between a task's arrival and its start.
Usage: check_gantt.py PROGRAM.amkir TRACE.json"""
import json
import re
import sys

program, trace_path = sys.argv[1], sys.argv[2]
sm_of, waits, signals = {}, {}, {}
for line in open(program):
    m = re.match(r"task (\d+) .* signal #(\S+)", line)
    if not m:
        continue
    t = int(m.group(1))
    sm_of[t] = int(re.search(r" sm (\d+) ", line).group(1))
    signals.setdefault(m.group(2), []).append(t)
    waits[t] = re.findall(r"wait #(\S+) >=", line) + re.findall(r", #(\S+) >=", line)
events = json.load(open(trace_path))["traceEvents"]
tasks = {e["args"]["task"]: e for e in events if e["cat"] != "wait"}
assert sorted(tasks) == sorted(sm_of), "one slice per task"
for t, e in tasks.items():
    assert e["tid"] == sm_of[t], f"task {t} on track {e['tid']}, not its SM {sm_of[t]}"
by_track = {}
for e in events:
    by_track.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
for tid, slices in by_track.items():
    slices.sort()
    for (a0, a1), (b0, b1) in zip(slices, slices[1:]):
        assert b0 >= a1 - 0.002, f"track {tid}: slices overlap at {b0}"
for t, e in tasks.items():
    for counter in waits[t]:
        for p in signals.get(counter, []):
            hop = 0 if sm_of[p] == sm_of[t] else 2.0
            end = tasks[p]["ts"] + tasks[p]["dur"]
            assert e["ts"] >= end + hop - 0.002, f"task {t} starts before producer {p} ends"
print(f"gantt ok: {len(tasks)} tasks on {len(by_track)} SMs")
