package hostroute

import "sync"

// Host is meshd's hold on this machine's kernel for subnet routes and exit
// nodes. It works in the network namespace of the thread that calls it (the
// process's, in meshd). Its methods may be called from any goroutine; one
// runs at a time.
type Host struct {
	mu sync.Mutex
	// saved holds, by interface index, the forwarding value each interface
	// had before ApplyForward turned it on: what RemoveForward, or an
	// ApplyForward that no longer needs the interface, puts back. Memory
	// only; see the package comment on crashes.
	saved map[int]savedForwarding
}

// savedForwarding is an interface's forwarding value before meshd changed
// it, with the interface's name at the time, for messages.
type savedForwarding struct {
	name  string
	value uint32
}

// New returns a Host that has changed nothing yet.
func New() *Host {
	return &Host{saved: map[int]savedForwarding{}}
}
