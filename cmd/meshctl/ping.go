package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// pingCommand is `meshctl ping NODE`: count probes, one every interval,
// each run by meshd (so meshctl needs no privileges), then a summary. It
// succeeds when at least one probe was answered; none answered is
// codes.PingLost, an unknown node codes.NodeUnknown.
func (a *app) pingCommand() *cobra.Command {
	var (
		count, port       int
		interval, timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "ping NODE",
		Short: "Check that NODE answers over the overlay, with the round-trip time of each probe",
		Long: "meshctl ping asks meshd to probe NODE over the overlay: a TCP connection attempt to the node's overlay " +
			"address on its gossip port (or --port). An accepted or refused connection is an answer (it crossed the overlay " +
			"both ways); no answer within --timeout is a lost probe. Gossip rides the overlay and its port is always open " +
			"between members, so the default probe checks the path; with --port the probe passes through the node's " +
			"inbound firewall (a port nobody listens on answers with a reset). The first probe includes Nebula's " +
			"handshake when no tunnel existed yet. Each probe's line ends with the path of the tunnel to NODE as " +
			"Nebula holds it after the probe: \"direct ADDR\" (the node's underlay address and port) or \"relayed via " +
			"NAME\" (the node relaying it); nothing when there is no tunnel.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if count < 1 || count > 1000 {
				return usageError{fmt.Errorf("--count %d: want 1 to 1000", count)}
			}
			if interval < 10*time.Millisecond {
				return usageError{fmt.Errorf("--interval %s: want at least 10ms", interval)}
			}
			if timeout <= 0 || timeout > 30*time.Second {
				return usageError{fmt.Errorf("--timeout %s: want more than 0 and up to 30s", timeout)}
			}
			if port < 0 || port > 65535 {
				return usageError{fmt.Errorf("--port %d: want 1 to 65535", port)}
			}
			return a.ping(cmd.Context(), apitype.PingRequest{Name: argv[0], Timeout: timeout, Port: port}, count, interval, asJSON)
		},
	}
	cmd.Flags().IntVarP(&count, "count", "c", 4, "number of probes (1-1000)")
	cmd.Flags().DurationVarP(&interval, "interval", "i", time.Second, "time between the starts of two probes")
	cmd.Flags().DurationVarP(&timeout, "timeout", "W", time.Second, "how long a probe waits for an answer (up to 30s)")
	cmd.Flags().IntVarP(&port, "port", "p", 0, "overlay port to probe, through the node's firewall (default: its gossip port)")
	a.addOutput(cmd)
	return cmd
}

// pingProbe is one probe in -o json.
type pingProbe struct {
	Probe    int               `json:"probe"`
	Answered bool              `json:"answered"`
	Answer   string            `json:"answer,omitempty"`
	Lost     string            `json:"lost,omitempty"`
	RTTms    float64           `json:"rtt_ms,omitempty"`
	Path     *apitype.PingPath `json:"path,omitempty"` // the tunnel's path after the probe
}

func (a *app) ping(ctx context.Context, req apitype.PingRequest, count int, interval time.Duration, asJSON bool) error {
	c := a.client()
	var (
		probes   []pingProbe
		rtts     []time.Duration
		first    *apitype.PingReply
		path     *apitype.PingPath // the last probe's that had one
		next     = time.Now()
		canceled bool
	)
	for i := 1; i <= count; i++ {
		r, err := c.Ping(ctx, req)
		if err != nil {
			if ctx.Err() != nil && first != nil { // interrupted: summarise what ran
				canceled = true
				break
			}
			return err
		}
		if first == nil {
			first = r
			if !asJSON {
				a.out.Printf("PING %s (%s): TCP probes to port %d over the overlay\n", r.Name, r.OverlayIP, r.Port)
			}
		}
		p := pingProbe{Probe: i, Answered: r.Answered, Answer: r.Answer, Lost: r.Lost, Path: r.Path}
		if r.Path != nil {
			path = r.Path
		}
		via := "" // the tunnel's path, when meshd knows one
		if r.Path != nil {
			via = ", " + r.Path.String()
		}
		if r.Answered {
			rtts = append(rtts, r.RTT)
			p.RTTms = ms(r.RTT)
			if !asJSON {
				a.out.Printf("answer from %s (%s): probe=%d time=%.3f ms (%s)%s\n", r.Name, r.OverlayIP, i, ms(r.RTT), r.Answer, via)
			}
		} else if !asJSON {
			if r.Lost == "" || r.Lost == "timeout" {
				a.out.Printf("no answer from %s (%s): probe=%d timeout %s%s\n", r.Name, r.OverlayIP, i, r.Timeout, via)
			} else {
				a.out.Printf("no answer from %s (%s): probe=%d %s%s\n", r.Name, r.OverlayIP, i, r.Lost, via)
			}
		}
		probes = append(probes, p)
		if i == count {
			break
		}
		next = next.Add(interval)
		select {
		case <-ctx.Done():
			canceled = true
		case <-time.After(time.Until(next)):
		}
		if canceled {
			break
		}
	}
	sent, answered := len(probes), len(rtts)
	loss := 100 * float64(sent-answered) / float64(sent)
	var lo, hi, sum time.Duration
	for i, d := range rtts {
		if i == 0 || d < lo {
			lo = d
		}
		hi = max(hi, d)
		sum += d
	}
	if asJSON {
		out := map[string]any{"name": first.Name, "overlay_ip": first.OverlayIP, "port": first.Port, "probes": probes,
			"sent": sent, "answered": answered, "loss_percent": loss}
		if answered > 0 {
			out["rtt_min_ms"], out["rtt_avg_ms"], out["rtt_max_ms"] = ms(lo), ms(sum/time.Duration(answered)), ms(hi)
		}
		if path != nil {
			out["path"] = path
		}
		if err := a.printJSON(out); err != nil {
			return err
		}
	} else {
		a.out.Printf("--- %s ping statistics ---\n", first.Name)
		a.out.Printf("%d probes, %d answered, %.0f%% lost", sent, answered, loss)
		if answered > 0 {
			a.out.Printf(", rtt min/avg/max = %.3f/%.3f/%.3f ms", ms(lo), ms(sum/time.Duration(answered)), ms(hi))
		}
		a.out.Println("")
	}
	if answered == 0 {
		return codes.Errorf(codes.PingLost, "%s (%s): none of %d probes to port %d answered within %s",
			first.Name, first.OverlayIP, sent, first.Port, req.Timeout)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
