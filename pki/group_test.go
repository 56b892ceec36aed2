package pki

import (
	"slices"
	"testing"

	"github.com/meshd/meshd/codes"
)

func TestCheckNodeGroups(t *testing.T) {
	for _, ok := range [][]string{nil, {"ops"}, {"db", "eu-west-1", "a"}} {
		if err := CheckNodeGroups(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{
		{""}, {"Ops"}, {"1db"}, {"db-"}, {"d b"}, {"db_1"}, {"abcdefghijklmnopqrstuvwxyz0123456"},
		{"control"}, {"worker"}, {"any"}, {"db", "db"},
		{"a", "b", "c", "d", "e", "f", "g", "h", "i"},
	} {
		if err := CheckNodeGroups(bad); codes.Of(err) != codes.BadGroup {
			t.Errorf("%q: got %v, want %s", bad, err, codes.BadGroup)
		}
	}
	for _, g := range []string{"control", "worker", "any", "ops"} {
		if err := CheckRuleGroup(g); err != nil {
			t.Errorf("rule group %q: %v", g, err)
		}
	}
	if got := NebulaGroups(RoleWorker, []string{"ops", "db"}); !slices.Equal(got, []string{"worker", "ops", "db"}) {
		t.Errorf("NebulaGroups = %v", got)
	}
}
