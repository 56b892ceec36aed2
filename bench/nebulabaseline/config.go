package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"gopkg.in/yaml.v3"
)

// options is one node's settings. Those that matter for the data path
// default to what meshd renders (mesh.DefaultConfig and mesh.Render): MTU
// 1300, 1 routine, 8 MiB socket buffers, AES-GCM, firewall any/any both
// ways, punchy punch and respond.
type options struct {
	name         string
	ca, cert     string // PEM
	key          string // PEM
	listen       netip.AddrPort
	lighthouses  map[netip.Addr]netip.AddrPort
	amLighthouse bool
	dev          string
	mtu          int
	routines     int
	sockBuf      int
	cipher       string
	fast         bool
	offloads     bool // tun.use_offloads and listen.udp_offloads, as meshd renders them by default
}

type m = map[string]any

// render returns the Nebula YAML for o.
func (o options) render() (string, error) {
	static := m{}
	hosts := []string{}
	for ip, u := range o.lighthouses {
		static[ip.String()] = []string{u.String()}
		if !o.amLighthouse {
			hosts = append(hosts, ip.String())
		}
	}
	slices.Sort(hosts)
	listen := m{"host": o.listen.Addr().String(), "port": o.listen.Port()}
	if o.sockBuf > 0 {
		listen["read_buffer"], listen["write_buffer"] = o.sockBuf, o.sockBuf
	}
	tun := m{"dev": o.dev, "mtu": o.mtu}
	if o.offloads {
		listen["udp_offloads"], tun["use_offloads"] = true, true
	}
	all := []m{{"port": "any", "proto": "any", "host": "any"}}
	interval := 10
	s := m{
		"pki":             m{"ca": o.ca, "cert": o.cert, "key": o.key, "blocklist": []string{}, "disconnect_invalid": true},
		"static_host_map": static,
		"listen":          listen,
		"punchy":          m{"punch": true, "respond": true},
		"tun":             tun,
		"firewall":        m{"outbound": all, "inbound": all},
		"routines":        o.routines,
		"cipher":          o.cipher,
		"logging":         m{"level": "info", "format": "text"},
	}
	if o.fast {
		interval = 1
		s["timers"] = m{"connection_alive_interval": 2, "pending_deletion_interval": 2}
	}
	s["lighthouse"] = m{"am_lighthouse": o.amLighthouse, "interval": interval, "hosts": hosts}
	var buf bytes.Buffer
	if err := yaml.NewEncoder(&buf).Encode(s); err != nil {
		return "", fmt.Errorf("render config: %w", err)
	}
	return buf.String(), nil
}
