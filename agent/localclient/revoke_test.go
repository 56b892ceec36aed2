package localclient_test

import (
	"net/http"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestRevokeToken: the id travels in the path (escaped), the answer is
// decoded, and a refusal comes back with its code.
func TestRevokeToken(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+apitype.PathRevokeToken, func(w http.ResponseWriter, r *http.Request) {
		switch id := r.PathValue("id"); id {
		case "0123456789ab":
			writeJSON(w, http.StatusOK, apitype.RevokeResponse{Token: apitype.Token{ID: id, State: apitype.TokenRevoked}, AlreadyRevoked: true})
		case "a/b?c":
			writeJSON(w, http.StatusOK, apitype.RevokeResponse{Token: apitype.Token{ID: id}})
		default:
			writeCoded(w, codes.TokenUnknown, "no token with id "+id)
		}
	})
	c := &localclient.Client{Socket: localclienttest.Serve(t, mux)}
	got, err := c.RevokeToken(t.Context(), "0123456789ab")
	if err != nil || got.Token.ID != "0123456789ab" || got.Token.State != apitype.TokenRevoked || !got.AlreadyRevoked {
		t.Fatalf("RevokeToken = %+v, %v", got, err)
	}
	if got, err := c.RevokeToken(t.Context(), "a/b?c"); err != nil || got.Token.ID != "a/b?c" {
		t.Fatalf("an id that needs escaping: %+v, %v", got, err)
	}
	if _, err := c.RevokeToken(t.Context(), "deadbeef"); codes.Of(err) != codes.TokenUnknown {
		t.Fatalf("unknown id: %v, want %s", err, codes.TokenUnknown)
	}
}
