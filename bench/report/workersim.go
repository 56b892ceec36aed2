package main

// Issue 54 item 7 (b): member.BenchmarkWorkerSim, one real worker runtime
// (userspace Nebula, gossip, watch copy) with 1,000 and 10,000 simulated
// peers on a simulated control node's watch table. The control node runs
// in a child process: the worker's figures are its own process's, the
// benchmark's own CPU per change taken off. Targets are issue 54's at
// 10,000.

const workerSimBench = "BenchmarkWorkerSim"

// workerSimRows are the benchmark's rows of the whole table.
var workerSimRows = func() []row {
	var out []row
	for _, n := range []string{"1000", "10000"} {
		at := map[string]string{"peers": n}
		label := map[string]string{"1000": "1,000", "10000": "10,000"}[n]
		r := []row{
			{what: "one worker, " + label + " simulated peers: idle CPU of the worker's process, % of a core", name: workerSimBench, metric: "idle_cpu_process", match: at},
			{what: "one worker, " + label + " simulated peers: the simulated control node's process at the same time, % of a core", name: workerSimBench, metric: "control_idle_cpu", match: at},
			{what: "one worker, " + label + " simulated peers: idle wakeups (context switches) of the worker's process", name: workerSimBench, metric: "idle_wakeups", match: at},
			{what: "one worker, " + label + " simulated peers: Nebula tunnels held at rest", name: workerSimBench, metric: "tunnels", match: at},
			{what: "one worker, " + label + " simulated peers: the worker's CPU per membership change (added, moved, removed and blocked), the idle rate taken off", name: workerSimBench, metric: "change_cpu", match: at},
			{what: "one worker, " + label + " simulated peers: the simulated control node's CPU per membership change, its idle rate taken off", name: workerSimBench, metric: "change_cpu_control", match: at},
			{what: "one worker, " + label + " simulated peers: CPU per peer added", name: workerSimBench, metric: "change_cpu_added", match: at},
			{what: "one worker, " + label + " simulated peers: CPU per peer moved", name: workerSimBench, metric: "change_cpu_moved", match: at},
			{what: "one worker, " + label + " simulated peers: CPU per peer removed and blocked", name: workerSimBench, metric: "change_cpu_removed", match: at},
		}
		if n == "10000" {
			r[0].target, r[0].ok = "≤ 0.5", le(0.5)
			r[3].target, r[3].ok = "≤ 32", le(32)
			r[4].target, r[4].ok = "≤ 1 ms", le(1000) // the worker's: the control node's is row 5
		}
		out = append(out, r...)
	}
	return out
}()
