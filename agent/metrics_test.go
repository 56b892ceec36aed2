package agent

import (
	"errors"
	"testing"

	"github.com/meshd/meshd/codes"
)

func TestMetricsAddrLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "[::1]:9464": true,
		"0.0.0.0:9464": false, "10.1.2.3:9464": false, "127.0.0.1:0": false, "localhost:9464": false} {
		c := DefaultFileConfig()
		c.MetricsAddr = addr
		err := c.Validate()
		var ce *ConfigError
		if ok != (err == nil) || (!ok && (codes.Of(err) != codes.ConfigInvalid || !errors.As(err, &ce) || ce.Field != "metrics_addr")) {
			t.Errorf("metrics_addr %q: %v", addr, err)
		}
	}
}
