package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// TestFirewallConfig: meshd.yaml's firewall section as an operator writes
// it. Valid rules load into the Nebula config (MeshBase); a bad rule is
// refused at load with codes.FirewallRule naming it; no firewall key keeps
// any/any; a null list and an unknown rule key are refused.
func TestFirewallConfig(t *testing.T) {
	load := func(body string) (File, error) {
		path := filepath.Join(t.TempDir(), "meshd.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Check(path, true, nil)
	}

	cfg, err := load("overlay_mtu: 1400\nfirewall:\n  inbound:\n    - {port: 22, proto: tcp, group: control}\n" +
		"    - port: 5432-5433\n      proto: tcp\n      groups: [worker, db]\n    - {port: any, proto: icmp, host: any}\n    - {port: 53, proto: udp, cidr: 10.42.0.0/24}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []mesh.FirewallRule{
		{Port: "22", Proto: "tcp", Group: "control"},
		{Port: "5432-5433", Proto: "tcp", Groups: []string{"worker", "db"}},
		{Port: "any", Proto: "icmp", Host: "any"},
		{Port: "53", Proto: "udp", CIDR: "10.42.0.0/24"},
	}
	m := cfg.MeshBase("", netip.Addr{})
	if !reflect.DeepEqual(m.Inbound, want) || !reflect.DeepEqual(m.Outbound, mesh.AnyAny()) || m.MTU != 1400 {
		t.Errorf("meshBase firewall/MTU = %+v / %+v / %d", m.Inbound, m.Outbound, m.MTU)
	}

	def, err := load("log_level: info\n")
	if err != nil {
		t.Fatal(err)
	}
	if m := def.MeshBase("", netip.Addr{}); !reflect.DeepEqual(m.Inbound, mesh.AnyAny()) || !reflect.DeepEqual(m.Outbound, mesh.AnyAny()) || m.MTU != 1300 {
		t.Errorf("default firewall/MTU = %+v / %+v / %d, want any/any both ways and 1300", m.Inbound, m.Outbound, m.MTU)
	}
	if deny, err := load("firewall:\n  inbound: []\n"); err != nil || deny.Firewall.Inbound == nil || len(deny.Firewall.Inbound) != 0 {
		t.Errorf("inbound: [] should load as drop-everything: %v %+v", err, deny.Firewall)
	}

	for _, tc := range []struct {
		body  string
		code  codes.Code
		field string
	}{
		{"firewall:\n  inbound:\n    - {port: 22, proto: sctp, group: control}\n", codes.FirewallRule, "inbound[0].proto"},
		{"firewall:\n  inbound:\n    - {port: 70000, proto: tcp, group: control}\n", codes.FirewallRule, "inbound[0].port"},
		{"firewall:\n  outbound:\n    - {port: any, proto: any, host: any}\n    - {port: 80, proto: tcp, group: Web}\n", codes.FirewallRule, "outbound[1].group"},
		{"firewall:\n  inbound:\n    - {port: 80, proto: tcp}\n", codes.FirewallRule, "inbound[0].host"},
		{"firewall:\n  inbound:\n", codes.FirewallRule, "inbound"},
		{"firewall:\n  inbound:\n    - {port: 80, proto: tcp, host: any, local_cidr: lan}\n", codes.FirewallRule, "inbound[0].local_cidr"},
		{"firewall:\n  inbound:\n    - {port: 80, proto: tcp, host: any, ca_name: other}\n", codes.ConfigInvalid, ""},
		{"overlay_mtu: 9100\n", codes.ConfigInvalid, ""},
		{"overlay_mtu: 500\n", codes.ConfigInvalid, ""},
	} {
		// Every problem is listed under ConfigInvalid; a bad rule's
		// problem carries FirewallRule and names the rule.
		_, err := load(tc.body)
		var fe *mesh.FirewallError
		if codes.Of(err) != codes.ConfigInvalid || !strings.Contains(fmt.Sprint(err), string(tc.code)) && tc.code != codes.ConfigInvalid ||
			(tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field)) {
			t.Errorf("%q: got %v, want %s naming %q", tc.body, err, tc.code, tc.field)
		}
	}
}
