package mesh

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/slackhq/nebula/util"
)

// startRefusal names the Config field behind an error nebula.Main returned
// at start, and why, as a *ConfigError (Value is the field's value,
// never a PEM block), so that the caller can name its own setting for it
// (agent/config.MeshKey): a UDP port another process holds, a listen
// address this machine does not have, a TUN device that cannot be
// created. Nebula says what it was doing as a ContextualError's context;
// an error it gives no such context for is returned as it is.
func startRefusal(c Config, err error) error {
	var ce *util.ContextualError
	if !errors.As(err, &ce) {
		return err
	}
	listen := net.JoinHostPort(c.ListenHost, strconv.Itoa(c.ListenPort))
	port := strconv.Itoa(c.ListenPort)
	switch ce.Context {
	case "Failed to open udp listener", "Failed to get listening port":
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return &ConfigError{Field: "ListenPort", Value: port, Err: fmt.Errorf("UDP %s is taken by another process (Nebula: %w)", listen, err)}
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return &ConfigError{Field: "ListenHost", Value: c.ListenHost, Err: fmt.Errorf("%s is no address of this machine (Nebula: %w)", c.ListenHost, err)}
		case errors.Is(err, syscall.EACCES):
			return &ConfigError{Field: "ListenPort", Value: port, Err: fmt.Errorf("UDP %s needs privileges this process lacks (Nebula: %w)", listen, err)}
		}
		return &ConfigError{Field: "ListenPort", Value: port, Err: fmt.Errorf("Nebula cannot listen on UDP %s: %w", listen, err)}
	case "Failed to resolve listen.host":
		return &ConfigError{Field: "ListenHost", Value: c.ListenHost, Err: fmt.Errorf("Nebula cannot resolve it: %w", err)}
	case "Failed to get a tun/tap device":
		if c.Userspace {
			return &ConfigError{Field: "Userspace", Value: "true", Err: fmt.Errorf("Nebula cannot create its userspace device: %w", err)}
		}
		switch {
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			return &ConfigError{Field: "TunDev", Value: c.TunDev, Err: fmt.Errorf("creating the TUN device needs CAP_NET_ADMIN, which this process lacks "+
				"(or run the overlay in userspace) (Nebula: %w)", err)}
		case errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.EEXIST):
			return &ConfigError{Field: "TunDev", Value: c.TunDev, Err: fmt.Errorf("the TUN device %s is held by another process (Nebula: %w)", c.TunDev, err)}
		}
		return &ConfigError{Field: "TunDev", Value: c.TunDev, Err: fmt.Errorf("Nebula cannot create the TUN device %s: %w", c.TunDev, err)}
	}
	return err
}
