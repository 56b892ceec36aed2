package overlay

import "time"

// meshd patch 6 (PATCHES.md, "Wait out the route race on a loaded
// machine"): setting the MTU on a new TUN device's own route right after
// the device is up sometimes fails with "invalid argument" (upstream's
// comment calls it a race); upstream tries twice more, 100 ms apart. On a
// loaded machine (50 agents forming on 2 cores, meshd issue 54) all three
// tries failed, Control.Start closed the device, and the node's join
// failed later and elsewhere. routeRaceWaits allows about 3 s.
var routeRaceWaits = []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}

// RouteRaceWaits are the waits between the tries (a copy; exported for
// meshd's test, mesh.TestRouteRaceRetries).
func RouteRaceWaits() []time.Duration { return append([]time.Duration(nil), routeRaceWaits...) }

// RetryRouteRace calls try, and again after each of waits while it
// fails, telling warn of each failure that is retried; it returns the
// last error (nil once a try succeeded).
func RetryRouteRace(try func() error, waits []time.Duration, sleep func(time.Duration), warn func(error)) error {
	err := try()
	for _, w := range waits {
		if err == nil {
			return nil
		}
		warn(err)
		sleep(w)
		err = try()
	}
	return err
}
