// Command nebulabaseline is the yardstick meshd's overlay is measured
// against (docs/performance.md): one Nebula v1.12.0 instance, the patched
// copy meshd pins, embedded in a process that does nothing else. No agent, no
// raft, no gossip, no log bridge: nebula.Main with a kernel TUN device and
// a slog logger (Nebula's logging package) on stderr.
//
// It is built and run only by the e2e benchmark BenchmarkOverlayThroughput
// (`make bench`), which gives it the settings meshd renders: MTU, routines,
// socket buffers, cipher, offloads, firewall any/any, timers.
//
//	nebulabaseline -gencerts DIR -nodes lh=10.42.0.1/16,a=10.42.0.2/16
//	nebulabaseline -certs DIR -name a -listen 0.0.0.0:4242 \
//	    -lighthouses 10.42.0.1=10.99.0.1:4242 [-am-lighthouse] [-dev nebula1] \
//	    [-mtu 1300] [-routines 1] [-sockbuf 8388608] [-cipher aes] [-fast] [-offloads=false] \
//	    [-cpuprofile FILE]
//
// A node runs until SIGTERM or SIGINT, then stops Nebula and writes the CPU
// profile, if asked for one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/slackhq/nebula"
	"github.com/slackhq/nebula/config"
	"github.com/slackhq/nebula/logging"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("nebulabaseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gen := fs.String("gencerts", "", "write a CA and host certificates into this directory, then exit")
	nodes := fs.String("nodes", "", "with -gencerts: name=overlay-ip/prefix,...")
	certs := fs.String("certs", "", "directory holding ca.crt, NAME.crt and NAME.key")
	var o options
	fs.StringVar(&o.name, "name", "", "this node's name (its certificate files)")
	listen := fs.String("listen", "0.0.0.0:4242", "UDP underlay listener")
	lighthouses := fs.String("lighthouses", "", "lighthouses: overlay-ip=underlay-ip:port,...")
	fs.BoolVar(&o.amLighthouse, "am-lighthouse", false, "be a lighthouse")
	fs.StringVar(&o.dev, "dev", "nebula1", "TUN device name")
	fs.IntVar(&o.mtu, "mtu", 1300, "TUN MTU")
	fs.IntVar(&o.routines, "routines", 1, "Nebula routines")
	fs.IntVar(&o.sockBuf, "sockbuf", 8<<20, "listen.read_buffer and write_buffer in bytes (0: kernel default)")
	fs.StringVar(&o.cipher, "cipher", "aes", "aes or chachapoly")
	fs.BoolVar(&o.offloads, "offloads", true, "Nebula's offloads (TUN TSO/USO, UDP GRO/GSO), as meshd asks for them by default")
	fs.BoolVar(&o.fast, "fast", false, "meshd's fast timers: lighthouse interval 1 s, connection timers 2 s")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run here")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *gen != "" {
		if err := genCerts(*gen, *nodes); err != nil {
			fmt.Fprintf(stderr, "nebulabaseline: %v\n", err)
			return 1
		}
		return 0
	}
	var err error
	if o.listen, err = netip.ParseAddrPort(*listen); err != nil {
		fmt.Fprintf(stderr, "nebulabaseline: -listen: %v\n", err)
		return 2
	}
	if o.lighthouses, err = parseLighthouses(*lighthouses); err != nil {
		fmt.Fprintf(stderr, "nebulabaseline: -lighthouses: %v\n", err)
		return 2
	}
	for _, f := range []struct {
		dst  *string
		file string
	}{{&o.ca, "ca.crt"}, {&o.cert, o.name + ".crt"}, {&o.key, o.name + ".key"}} {
		b, err := os.ReadFile(filepath.Join(*certs, f.file))
		if err != nil {
			fmt.Fprintf(stderr, "nebulabaseline: %v\n", err)
			return 1
		}
		*f.dst = string(b)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "nebulabaseline: -cpuprofile: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "nebulabaseline: -cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if err := serve(o, stderr); err != nil {
		fmt.Fprintf(stderr, "nebulabaseline: %v\n", err)
		return 1
	}
	return 0
}

// serve runs Nebula until SIGTERM or SIGINT.
func serve(o options, stderr io.Writer) error {
	text, err := o.render()
	if err != nil {
		return err
	}
	// Since Nebula v1.11 nebula.Main no longer applies logging.* to the
	// logger it is given; ApplyConfig does, as the nebula binary does.
	l := logging.NewLogger(stderr)
	c := config.NewC(l)
	if err := c.LoadString(text); err != nil {
		return fmt.Errorf("load config: %w", err)
	}
	if err := logging.ApplyConfig(l, c); err != nil {
		return fmt.Errorf("apply logging config: %w", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ctrl, err := nebula.Main(c, false, "baseline", l, nil)
	if err != nil {
		return fmt.Errorf("start nebula: %w", err)
	}
	ctrl.Start()
	<-sig
	ctrl.Stop()
	return nil
}

// parseLighthouses reads overlay-ip=underlay-ip:port,...
func parseLighthouses(s string) (map[netip.Addr]netip.AddrPort, error) {
	out := map[netip.Addr]netip.AddrPort{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		ip, addr, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errors.New("want overlay-ip=underlay-ip:port")
		}
		o, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, err
		}
		u, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		out[o] = u
	}
	return out, nil
}
