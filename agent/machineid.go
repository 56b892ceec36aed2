package agent

import "github.com/meshd/meshd/agent/statedir"

// DefaultMachineIDPath is where systemd keeps the machine's id (the clone
// check, statedir.CheckMachine).
const DefaultMachineIDPath = statedir.DefaultMachineIDPath

// machineIDPath is the file this agent reads: Deps.MachineIDPath (tests)
// or DefaultMachineIDPath.
func (a *Agent) machineIDPath() string {
	if a.d.MachineIDPath != "" {
		return a.d.MachineIDPath
	}
	return DefaultMachineIDPath
}

// machineIDToRecord is what init and join record in node.json: this
// machine's hash, or "" (logged) when it has no machine-id.
func (a *Agent) machineIDToRecord() string {
	h, err := statedir.MachineIDHash(a.machineIDPath())
	if err != nil {
		a.log.Warn("no machine-id to record; a copy of this node's state dir on another machine will not be detected", "err", err)
		return ""
	}
	return h
}
