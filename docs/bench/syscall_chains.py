#!/usr/bin/env python3
"""The governed board's streams, system call by system call (docs/performance.md).

Usage: syscall_chains.py PERF_DATA TEST_PID GATEWAY_PID PROXY_PID

PERF_DATA is a `perf record` of a streams-only board (SVC_BENCH_PARTS=streams) over the
benchmark process (load generator and mock upstream), the API server and the bare proxy:

    perf record -o streams.perf -p TEST_PID,GATEWAY_PID,PROXY_PID \
      -e syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_write,syscalls:sys_exit_write \
      -- sleep 70

For every stream through a server S it finds the chain: the client writes the request -> S reads it
(wake-in) -> S writes the upstream request (own-pre) -> the mock reads it (up-wake) -> the mock writes
the answer (mock) -> S reads it (back-wake) -> S writes the answer's head and first event to the client
(own-post) -> the client reads it (client-wake), and prints each phase's p50 for the streams after an idle
gap (no request on S's client connections in the 10 ms before) and back to back, gateway against proxy.

Recorded with every system call and the scheduler's events instead,

    perf record -o streams.perf -p TEST_PID,GATEWAY_PID,PROXY_PID \
      -e raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_wakeup,sched:sched_switch -- sleep 40

it also prints what each server's threads do in own-pre (the system calls, their time inside, the
wake-ups the process makes and its threads' switches, per stream) and, after the answer's first write,
how long the writing thread keeps its CPU beside the client's wake.
"""
import sys, re, subprocess, statistics, collections, bisect
perf_data, T, G, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "pid,tid,time,event,trace",
                      "--pid", f"{T},{G},{P}"], capture_output=True, text=True).stdout
rx = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)")
rawnr = re.compile(r"NR (\d+) \(([0-9a-f]+)")
rawret = re.compile(r"NR (\d+) = (-?\d+)")
pend = {}
ios = collections.defaultdict(list)  # pid -> [(kind, fd, t_enter, t_exit, n)]
calls = collections.defaultdict(list)  # pid -> [(t_enter, t_exit, tid, nr)]: every system call (raw_syscalls)
sched = collections.defaultdict(list)  # pid -> [(t, what, tid)]: wake-ups the process makes, its threads' switches
for line in out.splitlines():
    m = rx.match(line)
    if not m: continue
    pid, tid, t, ev, rest = int(m[1]), int(m[2]), float(m[3]), m[4], m[5]
    if ev in ("syscalls:sys_enter_read", "syscalls:sys_enter_write"):
        pend[tid] = ("r" if ev.endswith("read") else "w", int(re.search(r"fd: (0x[0-9a-f]+)", rest)[1], 16), t, None)
    elif ev == "raw_syscalls:sys_enter":
        a = rawnr.search(rest)
        nr = int(a[1])
        pend[tid] = ({0: "r", 1: "w"}.get(nr), int(a[2], 16), t, nr)
    elif ev in ("syscalls:sys_exit_read", "syscalls:sys_exit_write", "raw_syscalls:sys_exit"):
        if tid not in pend: continue
        kind, fd, t0, nr = pend.pop(tid)
        if nr is not None:
            calls[pid].append((t0, t, tid, nr))
        if kind is None: continue
        n = int(rawret.search(rest)[2]) if nr is not None else int(rest.strip(), 16)
        if n <= 0 or n >= 1 << 63: continue
        ios[pid].append((kind, fd, t0, t, n, tid))
    elif ev == "sched:sched_wakeup":
        sched[pid].append((t, "wakeup", tid))
    elif ev == "sched:sched_switch":
        sched[pid].append((t, "switch-out" if f"prev_pid={tid} " in rest else "switch", tid))
for p in ios: ios[p].sort(key=lambda x: x[3])
Tr = [x for x in ios[T] if x[0] == "r"]; Trt = [x[3] for x in Tr]
Tw = [x for x in ios[T] if x[0] == "w"]; Twt = [x[2] for x in Tw]
def first_after(lst, times, t):
    i = bisect.bisect_right(times, t)
    return lst[i] if i < len(lst) else None
phases = ["wake-in", "own-pre", "up-wake", "mock", "back-wake", "own-post", "client-wake", "total"]
res = {}
for S, lane in ((G, "gateway"), (P, "proxy")):
    ev = ios[S]
    # a client-facing connection: after 5 ms of silence, the client speaks first
    last, votes = {}, collections.defaultdict(collections.Counter)
    for y in ev:
        if y[3] - last.get(y[1], -1) > 0.005:
            votes[y[1]][y[0]] += 1
        last[y[1]] = y[3]
    firstio = {fd: c.most_common(1)[0][0] for fd, c in votes.items()}
    rows = {"gap": [], "warm": [], "all": []}
    for i, x in enumerate(ev):
        if x[0] != "r" or firstio[x[1]] != "r": continue
        C, t1 = x[1], x[3]
        # the client's write just before
        j = bisect.bisect_right(Twt, t1) - 1
        if j < 0: continue
        w0 = Tw[j]; t0 = w0[2]
        if t1 - t0 > 0.003: continue
        # S: first write on another fd
        k = i + 1
        while k < len(ev) and not (ev[k][0] == "w" and ev[k][1] != C): k += 1
        if k >= len(ev): continue
        wu = ev[k]; U = wu[1]; t2 = wu[2]
        rm = first_after(Tr, Trt, t2)
        if not rm: continue
        t3 = rm[3]
        wm = first_after(Tw, Twt, t3)
        if not wm: continue
        t4 = wm[2]
        # S reads on U after t4, then writes on C
        k2 = k + 1
        while k2 < len(ev) and not (ev[k2][0] == "r" and ev[k2][1] == U and ev[k2][3] > t4): k2 += 1
        if k2 >= len(ev): continue
        t5 = ev[k2][3]
        k3 = k2 + 1
        while k3 < len(ev) and not (ev[k3][0] == "w" and ev[k3][1] == C): k3 += 1
        if k3 >= len(ev): continue
        t6 = ev[k3][2]
        rc = first_after(Tr, Trt, t6)
        if not rc: continue
        t7 = rc[3]
        if t7 - t0 > 0.01: continue
        # a stream: at least five more writes on C within 20 ms (its frames, 2 ms apart)
        frames = 0
        for k4 in range(k3 + 1, len(ev)):
            if ev[k4][2] - t6 > 0.020 or (ev[k4][0] == "r" and ev[k4][1] == C): break
            if ev[k4][0] == "w" and ev[k4][1] == C: frames += 1
        if frames < 5: continue
        rows["all"].append((t1, C, t2, ev[k3][5], [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t7 - t0], (w0[4], x[4], wu[4], ev[k3][4])))
    # the gap: no read on a client-facing connection in the 10 ms before
    cfds = {r[1] for r in rows["all"]}
    reads = [x[3] for x in ev if x[0] == "r" and x[1] in cfds]
    seen = set()
    for t1, C, t2, wtid, v, sz in rows["all"]:
        key = round(t1 - v[0], 7)  # the client's write
        if key in seen: continue
        seen.add(key)
        j = bisect.bisect_left(reads, t1) - 1
        prev = reads[j] if j >= 0 else 0
        rows["gap" if t1 - prev > 0.010 else "warm"].append((v, sz, t1, t2, wtid))
    res[lane] = rows
for kind in ("gap", "warm"):
    print(f"-- {kind}: p50 µs per phase")
    print(f"{'lane':10s} {'n':>5s} " + " ".join(f"{p:>11s}" for p in phases))
    meds = {}
    for lane in ("proxy", "gateway"):
        rows = res[lane][kind]
        if not rows: continue
        med = [statistics.median(r[0][i] for r in rows) * 1e6 for i in range(len(phases))]
        meds[lane] = med
        sizes = collections.Counter(r[1] for r in rows).most_common(2)
        print(f"{lane:10s} {len(rows):5d} " + " ".join(f"{m:11.1f}" for m in med) + f"   sizes {sizes}")
    if len(meds) == 2:
        print(f"{'diff':10s} {'':5s} " + " ".join(f"{g-p:+11.1f}" for g, p in zip(meds['gateway'], meds['proxy'])))

# With raw_syscalls (and sched) events: what each server's threads do in own-pre, per stream.
NAMES = {0: "read", 1: "write", 3: "close", 9: "mmap", 11: "munmap", 13: "rt_sigaction", 14: "rt_sigprocmask",
         15: "rt_sigreturn", 24: "sched_yield", 28: "madvise", 35: "nanosleep", 39: "getpid", 186: "gettid",
         200: "tkill", 202: "futex", 228: "clock_gettime", 230: "clock_nanosleep", 232: "epoll_wait",
         233: "epoll_ctl", 234: "tgkill", 281: "epoll_pwait", 288: "accept4", 290: "eventfd2", 441: "epoll_pwait2"}
if any(calls.values()):
    for kind in ("gap", "warm"):
        print(f"-- {kind}: own-pre per stream (mean count, mean µs inside) for the process's threads")
        table = {}
        for lane, S in (("proxy", P), ("gateway", G)):
            rows = res[lane][kind]
            if not rows: continue
            cs = sorted(calls[S]); cst = [c[0] for c in cs]
            sc = sorted(sched[S]); sct = [c[0] for c in sc]
            cnt, dur = collections.Counter(), collections.Counter()
            for r in rows:
                t1, t2 = r[2], r[3]
                for c in cs[bisect.bisect_right(cst, t1):bisect.bisect_left(cst, t2)]:
                    name = NAMES.get(c[3], str(c[3]))
                    cnt[name] += 1
                    dur[name] += (min(c[1], t2) - c[0]) * 1e6
                for e in sc[bisect.bisect_right(sct, t1):bisect.bisect_left(sct, t2)]:
                    cnt["~" + e[1]] += 1
            table[lane] = {k: (cnt[k] / len(rows), dur[k] / len(rows)) for k in cnt}
        for k in sorted(set().union(*[set(v) for v in table.values()])):
            print(f"  {k:16s} " + "  ".join(f"{lane} {table[lane].get(k, (0, 0))[0]:5.2f} x {table[lane].get(k, (0, 0))[1]:7.1f} µs" for lane in table))
    # After the answer's first write: how long the writing thread kept its CPU (until it blocked, yielded or
    # was preempted), beside the client's wake.
    print("-- after the first write: the writing thread's time on its CPU until it switches out (p50 µs), client-wake (p50 µs)")
    for kind in ("gap", "warm"):
        for lane, S in (("proxy", P), ("gateway", G)):
            rows = res[lane][kind]
            sc = sorted(e for e in sched[S] if e[1] == "switch-out"); sct = [e[0] for e in sc]
            held, wake = [], []
            for r in rows:
                v, t1, wtid = r[0], r[2], r[4]
                t6 = t1 + sum(v[1:6])
                j, out = bisect.bisect_right(sct, t6), None
                while j < len(sc) and sc[j][0] - t6 < 0.005:
                    if sc[j][2] == wtid:
                        out = sc[j][0]
                        break
                    j += 1
                if out is None: continue
                held.append((out - t6) * 1e6); wake.append(v[6] * 1e6)
            if held:
                print(f"  {kind:5s} {lane:8s} n {len(held):4d}  held {statistics.median(held):7.1f}  client-wake {statistics.median(wake):7.1f}")
