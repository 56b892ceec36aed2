package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

func TestDefaultFileConfigValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

// withCfg returns Default changed by f.
func withCfg(f func(c *File)) File {
	c := Default()
	f(&c)
	return c
}

func TestValidate(t *testing.T) {
	// "/run/" + n-5 more bytes: a socket path exactly n bytes long.
	socketOfLen := func(n int) string { return "/run/" + strings.Repeat("s", n-5) }
	tests := []struct {
		name   string
		cfg    File
		fields []string // nil: valid; otherwise any of these may be named
	}{
		{"ok/default", Default(), nil},
		{"ok/lease-equals-heartbeat", withCfg(func(c *File) { c.Raft.LeaderLease = c.Raft.HeartbeatTimeout }), nil},
		{"ok/short-test-timings", withCfg(func(c *File) {
			c.Raft = RaftTiming{HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLease: 100 * time.Millisecond, PromoteTimeout: time.Second}
		}), nil},
		{"ok/socket-99-bytes", withCfg(func(c *File) { c.Socket = socketOfLen(99) }), nil},
		{"ok/advertise-addr", withCfg(func(c *File) { c.AdvertiseAddr = "192.0.2.7" }), nil},
		{"ok/bind-ipv6", withCfg(func(c *File) { c.BindAddr = "::" }), nil},
		{"ok/overlay-8", withCfg(func(c *File) { c.OverlayCIDR = "10.0.0.0/8" }), nil},
		{"ok/overlay-28", withCfg(func(c *File) { c.OverlayCIDR = "10.42.0.16/28" }), nil},
		{"ok/log-debug-json", withCfg(func(c *File) { c.LogLevel, c.LogFormat = "debug", "json" }), nil},
		{"ok/port-65535", withCfg(func(c *File) { c.Ports.Nebula = 65535 }), nil},
		{"ok/token-retention-a-minute", withCfg(func(c *File) { c.TokenRetention = time.Minute }), nil},
		{"ok/overlay-mtu-576-routines-64", withCfg(func(c *File) { c.OverlayMTU, c.OverlayRoutines = 576, 64 }), nil},
		{"ok/overlay-mtu-8937-routines-2", withCfg(func(c *File) { c.OverlayMTU, c.OverlayRoutines = 8937, 2 }), nil},
		{"ok/token-retention-a-year", withCfg(func(c *File) { c.TokenRetention = 365 * 24 * time.Hour }), nil},
		{"ok/max-clock-skew-5s", withCfg(func(c *File) { c.MaxClockSkew = 5 * time.Second }), nil},
		{"ok/max-clock-skew-1h", withCfg(func(c *File) { c.MaxClockSkew = time.Hour }), nil},

		{"fail/empty-state-dir", withCfg(func(c *File) { c.StateDir = "" }), []string{"state_dir"}},
		{"fail/relative-state-dir", withCfg(func(c *File) { c.StateDir = "var/lib/meshd" }), []string{"state_dir"}},
		{"fail/relative-socket", withCfg(func(c *File) { c.Socket = "meshd.sock" }), []string{"socket"}},
		{"fail/socket-path-too-long", withCfg(func(c *File) { c.Socket = socketOfLen(120) }), []string{"socket"}},
		{"fail/socket-path-100-bytes", withCfg(func(c *File) { c.Socket = socketOfLen(100) }), []string{"socket"}},
		{"fail/bind-addr-not-ip", withCfg(func(c *File) { c.BindAddr = "localhost" }), []string{"bind_addr"}},
		{"fail/advertise-addr-not-ip", withCfg(func(c *File) { c.AdvertiseAddr = "eth0" }), []string{"advertise_addr"}},
		{"fail/overlay-33", withCfg(func(c *File) { c.OverlayCIDR = "10.42.0.0/33" }), []string{"overlay_cidr"}},
		{"fail/overlay-unmasked", withCfg(func(c *File) { c.OverlayCIDR = "10.42.1.0/16" }), []string{"overlay_cidr"}},
		{"fail/overlay-29", withCfg(func(c *File) { c.OverlayCIDR = "10.42.0.0/29" }), []string{"overlay_cidr"}},
		{"fail/overlay-7", withCfg(func(c *File) { c.OverlayCIDR = "10.0.0.0/7" }), []string{"overlay_cidr"}},
		{"fail/overlay-ipv6", withCfg(func(c *File) { c.OverlayCIDR = "fd00:42::/64" }), []string{"overlay_cidr"}},
		{"fail/overlay-no-prefix", withCfg(func(c *File) { c.OverlayCIDR = "10.42.0.0" }), []string{"overlay_cidr"}},
		{"fail/bad-log-level", withCfg(func(c *File) { c.LogLevel = "loud" }), []string{"log_level"}},
		{"fail/bad-log-format", withCfg(func(c *File) { c.LogFormat = "xml" }), []string{"log_format"}},
		{"fail/port-0", withCfg(func(c *File) { c.Ports.Gossip = 0 }), []string{"ports.gossip"}},
		{"fail/port-negative", withCfg(func(c *File) { c.Ports.Control = -1 }), []string{"ports.control"}},
		{"fail/port-0-raft", withCfg(func(c *File) { c.Ports.Raft = 0 }), []string{"ports.raft"}},
		{"fail/port-65536", withCfg(func(c *File) { c.Ports.Nebula = 65536 }), []string{"ports.nebula"}},
		{"fail/stun-port-0", withCfg(func(c *File) { c.Ports.STUN = 0 }), []string{"ports.stun"}},
		{"fail/stun-port-is-nebula", withCfg(func(c *File) { c.Ports.STUN = c.Ports.Nebula }), []string{"ports.stun"}},
		{"fail/stun-port-is-gossip", withCfg(func(c *File) { c.Ports.STUN = c.Ports.Gossip }), []string{"ports.stun"}},
		{"fail/heartbeat-too-short", withCfg(func(c *File) { c.Raft.HeartbeatTimeout = time.Millisecond }), []string{"raft.heartbeat_timeout"}},
		{"fail/election-too-long", withCfg(func(c *File) { c.Raft.ElectionTimeout = 2 * time.Minute }), []string{"raft.election_timeout"}},
		{"fail/lease-zero", withCfg(func(c *File) { c.Raft.LeaderLease = 0 }), []string{"raft.leader_lease"}},
		{"fail/raft-lease-above-heartbeat", withCfg(func(c *File) {
			c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout, c.Raft.LeaderLease = time.Second, time.Second, 2*time.Second
		}), []string{"raft.leader_lease"}},
		// hashicorp/raft's ValidateConfig refuses ElectionTimeout < HeartbeatTimeout,
		// so this config would pass here and then fail when raft starts.
		{"fail/raft-election-below-heartbeat", withCfg(func(c *File) {
			c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout = 2*time.Second, time.Second
		}), []string{"raft.election_timeout", "raft.heartbeat_timeout"}},
		// control and raft are both TCP listeners on bind_addr: one of them
		// would fail to bind after meshd has started.
		{"fail/control-port-equals-raft-port", withCfg(func(c *File) { c.Ports.Raft = c.Ports.Control }),
			[]string{"ports.control", "ports.raft"}},
		{"fail/bad-overlay-mode", withCfg(func(c *File) { c.OverlayMode = "tap" }), []string{"overlay_mode"}},
		{"fail/overlay-mtu-575", withCfg(func(c *File) { c.OverlayMTU = 575 }), []string{"overlay_mtu"}},
		{"fail/overlay-mtu-8938", withCfg(func(c *File) { c.OverlayMTU = 8938 }), []string{"overlay_mtu"}},
		{"fail/overlay-routines-0", withCfg(func(c *File) { c.OverlayRoutines = 0 }), []string{"overlay_routines"}},
		{"fail/overlay-routines-65", withCfg(func(c *File) { c.OverlayRoutines = 65 }), []string{"overlay_routines"}},
		{"fail/tun-device-too-long", withCfg(func(c *File) { c.TunDevice = "meshd-overlay-dev0" }), []string{"tun_device"}},
		{"fail/max-clock-skew-zero", withCfg(func(c *File) { c.MaxClockSkew = 0 }), []string{"max_clock_skew"}},
		{"fail/max-clock-skew-under-5s", withCfg(func(c *File) { c.MaxClockSkew = 4 * time.Second }), []string{"max_clock_skew"}},
		{"fail/max-clock-skew-over-1h", withCfg(func(c *File) { c.MaxClockSkew = time.Hour + time.Second }), []string{"max_clock_skew"}},
		{"fail/dns-domain-local", withCfg(func(c *File) { c.DNS.Domain = "local" }), []string{"dns.domain"}},
		{"fail/dns-domain-trailing-dot", withCfg(func(c *File) { c.DNS.Domain = "mesh." }), []string{"dns.domain"}},
		{"fail/dns-loopback-underlay", withCfg(func(c *File) { c.DNS.Loopback = "10.0.0.1" }), []string{"dns.loopback"}},
		{"fail/dns-loopback-resolved-stub", withCfg(func(c *File) { c.DNS.Loopback = "127.0.0.53" }), []string{"dns.loopback"}},
		{"fail/dns-port-zero", withCfg(func(c *File) { c.DNS.Port = 0 }), []string{"dns.port"}},
		{"ok/dns-off-ignores-its-keys", withCfg(func(c *File) { c.DNS = DNS{} }), nil},
		{"fail/token-retention-zero", withCfg(func(c *File) { c.TokenRetention = 0 }), []string{"token_retention"}},
		{"fail/token-retention-under-a-minute", withCfg(func(c *File) { c.TokenRetention = time.Minute - time.Second }), []string{"token_retention"}},
		{"fail/token-retention-over-a-year", withCfg(func(c *File) { c.TokenRetention = 365*24*time.Hour + time.Second }), []string{"token_retention"}},
		{"ok/ephemeral-after-10s", withCfg(func(c *File) { c.EphemeralAfter = 10 * time.Second }), nil},
		{"ok/ephemeral-after-24h", withCfg(func(c *File) { c.EphemeralAfter = 24 * time.Hour }), nil},
		{"fail/ephemeral-after-zero", withCfg(func(c *File) { c.EphemeralAfter = 0 }), []string{"ephemeral_after"}},
		{"fail/ephemeral-after-under-10s", withCfg(func(c *File) { c.EphemeralAfter = 10*time.Second - time.Millisecond }), []string{"ephemeral_after"}},
		{"fail/ephemeral-after-over-24h", withCfg(func(c *File) { c.EphemeralAfter = 24*time.Hour + time.Second }), []string{"ephemeral_after"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.fields == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if got := codes.Of(err); got != codes.ConfigInvalid {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.ConfigInvalid)
			}
			ce, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %v carries no *Error", err)
			}
			if !slices.Contains(tt.fields, ce.Field) {
				t.Fatalf("Error.Field = %q, want one of %q", ce.Field, tt.fields)
			}
		})
	}
}

// writeCfgFile writes body as a config file in a fresh temp dir.
func writeCfgFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "meshd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	def := Default()
	tests := []struct {
		name      string
		path      func(t *testing.T) string
		mustExist bool
		wantCode  codes.Code
		check     func(t *testing.T, c File)
	}{
		{"ok/no-path", func(*testing.T) string { return "" }, true, "", nil},
		{"ok/missing-file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.yaml") }, false, "", nil},
		{"ok/empty-file", func(t *testing.T) string { return writeCfgFile(t, "") }, true, "", nil},
		{"ok/comments-only", func(t *testing.T) string { return writeCfgFile(t, "# nothing set\n") }, true, "", nil},
		{"ok/overrides", func(t *testing.T) string {
			return writeCfgFile(t, "log_level: debug\nports:\n  gossip: 8946\nraft:\n  heartbeat_timeout: 2s\n  election_timeout: 3s\n")
		}, true, "", func(t *testing.T, c File) {
			want := Default()
			want.LogLevel, want.Ports.Gossip = "debug", 8946
			want.Raft.HeartbeatTimeout, want.Raft.ElectionTimeout = 2*time.Second, 3*time.Second
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("config = %+v, want %+v (unset fields keep their defaults)", c, want)
			}
		}},
		{"ok/jwt-keys-max-age", func(t *testing.T) string {
			return writeCfgFile(t, "jwt:\n  issuers:\n    - issuer: https://ci.example\n      discovery: true\n      audience: meshd\n"+
				"      keys_max_age: 90s\n      rules:\n        - name_prefix: ci-\n")
		}, true, "", func(t *testing.T, c File) {
			if len(c.JWT.Issuers) != 1 || c.JWT.Issuers[0].KeysMaxAge != 90*time.Second {
				t.Fatalf("jwt.issuers = %+v, want one with keys_max_age 90s", c.JWT.Issuers)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			c.JWT.Issuers[0].KeysMaxAge = 48 * time.Hour
			if err := c.Validate(); codes.Of(err) != codes.ConfigInvalid {
				t.Fatalf("keys_max_age 48h: %v, want %s", err, codes.ConfigInvalid)
			}
		}},
		{"fail/missing-file-must-exist", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.yaml") }, true, codes.ConfigInvalid, nil},
		{"fail/path-is-a-directory", func(t *testing.T) string { return t.TempDir() }, false, codes.ConfigInvalid, nil},
		{"fail/not-yaml", func(t *testing.T) string { return writeCfgFile(t, "{{{\n") }, false, codes.ConfigInvalid, nil},
		{"fail/wrong-type", func(t *testing.T) string { return writeCfgFile(t, "ports:\n  gossip: many\n") }, false, codes.ConfigInvalid, nil},
		{"fail/bad-duration", func(t *testing.T) string { return writeCfgFile(t, "raft:\n  heartbeat_timeout: soon\n") }, false, codes.ConfigInvalid, nil},
		{"fail/duration-bare-int", func(t *testing.T) string { return writeCfgFile(t, "raft:\n  heartbeat_timeout: 1000\n") }, false, codes.ConfigInvalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path(t), tt.mustExist)
			if got := codes.Of(err); got != tt.wantCode {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, tt.wantCode)
			}
			switch {
			case tt.check != nil:
				tt.check(t, c)
			case tt.wantCode == "" && !reflect.DeepEqual(c, def):
				t.Fatalf("config = %+v, want the defaults", c)
			}
		})
	}
}

// An unknown key fails, and the error names it, so that a typo is found.
// The name is the one thing read from the error text.
func TestLoadConfigUnknownKey(t *testing.T) {
	tests := []struct {
		name, body, key string
	}{
		{"fail/unknown-top-level-key", "state_dir: /var/lib/meshd\nstat_dir: /srv/meshd\n", "stat_dir"},
		{"fail/unknown-nested-key", "ports:\n  gosip: 7946\n", "gosip"},
		{"fail/unknown-raft-key", "raft:\n  heartbeat: 1s\n", "heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeCfgFile(t, tt.body), true)
			if got := codes.Of(err); got != codes.ConfigInvalid {
				t.Fatalf("codes.Of(%v) = %q, want %q", err, got, codes.ConfigInvalid)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("error %q does not name the unknown key %q", err, tt.key)
			}
		})
	}
}

func TestMetricsAddr(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "[::1]:9464": true,
		"10.1.2.3:9464": true, "100.64.0.9:9464": true, // an overlay address: checked against the node's at start
		"0.0.0.0:9464": false, "[::]:9464": false, "224.0.0.1:9464": false, "169.254.1.1:9464": false,
		"127.0.0.1:0": false, "localhost:9464": false, "10.1.2.3": false} {
		c := Default()
		c.MetricsAddr = addr
		err := c.Validate()
		var ce *Error
		if ok != (err == nil) || (!ok && (codes.Of(err) != codes.ConfigInvalid || !errors.As(err, &ce) || ce.Field != "metrics_addr")) {
			t.Errorf("metrics_addr %q: %v", addr, err)
		}
	}
	// In userspace mode the overlay address is not the kernel's.
	c := Default()
	c.OverlayMode, c.MetricsAddr = OverlayUserspace, "10.1.2.3:9464"
	if err := c.Validate(); codes.Of(err) != codes.ConfigInvalid {
		t.Errorf("userspace, overlay metrics_addr: %v", err)
	}
	// At start: loopback or the node's own overlay address, nothing else.
	overlay := netip.MustParseAddr("10.1.2.3")
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "10.1.2.3:9464": true, "10.1.2.4:9464": false} {
		c := Default()
		c.MetricsAddr = addr
		if err := c.CheckMetricsOverlay(overlay); ok != (err == nil) || (!ok && codes.Of(err) != codes.MetricsAddrRefused) {
			t.Errorf("metrics_addr %q on node %s: %v", addr, overlay, err)
		}
	}
}
