package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Token ids as `meshctl tokens` shows them are 12 hex characters; revoke
// takes at least minTokenID of one (a unique prefix), or the whole hash.
const (
	minTokenID = 8
	maxTokenID = 64
)

// checkTokenID is the usage check of a token id: 8 to 64 hex characters.
// A bad id is not echoed: it may be a whole token pasted by mistake.
func checkTokenID(id string) error {
	if len(id) < minTokenID || len(id) > maxTokenID || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "" {
		return usageError{fmt.Errorf("token ID: want %d to %d hex characters of an ID `meshctl tokens` shows (not the token itself)",
			minTokenID, maxTokenID)}
	}
	return nil
}

func (a *app) revokeTokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an unused join token (on a control node)",
		Long: "revoke records through raft that the join token with this ID (as `meshctl tokens` shows it, " +
			"or a unique prefix of at least 8 characters) admits nobody: a join with it then fails with " +
			"X401011TKNRVK. A token that was used already cannot be revoked (remove its node instead); " +
			"revoking a revoked token again changes nothing and succeeds.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if err := checkTokenID(argv[0]); err != nil {
				return err
			}
			resp, err := a.client().RevokeToken(cmd.Context(), argv[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			t := resp.Token
			if resp.AlreadyRevoked {
				a.out.Printf("token %s (%s, %s) was already revoked at %s; nothing changed\n", t.ID, t.Name, t.Role,
					t.RevokedAt.Local().Format(time.RFC3339))
				return nil
			}
			a.out.Printf("token %s (%s, %s) revoked; a join with it now fails\n", t.ID, t.Name, t.Role)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}
