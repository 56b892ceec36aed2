// Package idtoken verifies the JWT a node joins with (issue 31, "join by
// identity, no stored secret"): a short-lived token its platform gave it,
// such as a CI job's OIDC token or a Kubernetes projected service-account
// token, instead of a join token the cluster minted. A control node trusts
// a list of issuers (Issuer, from meshd.yaml); Verifier checks a token
// against them and maps its claims, through the issuer's rules, to an
// Identity: role, groups, node name or name prefix, ephemeral.
//
// It is a library: the enroll server calls Verify, records
// Identity.JTI in raft to refuse a replay (codes.JWTReplayed is the
// caller's), and admits the node as the Identity says. Nothing here
// writes, listens or logs.
//
// No JWT is parsed or verified by hand. Signature, algorithm, issuer and
// expiry are checked by github.com/coreos/go-oidc/v3's IDTokenVerifier,
// with the keys of a jwks_file (go-jose's JSONWebKeySet, as a static key
// set) or those discovery finds (go-oidc's provider and remote key set,
// which fetches the jwks_uri again for a key it has not seen). The only
// claim read before the signature is checked is iss, to pick the
// issuer's keys; go-oidc checks it again. Claims are read from the
// verified token only.
//
// Choices that matter:
//   - Every failure has its code, and Verify's comment gives their order:
//     malformed, issuer, signature, audience, lifetime, time, rules. An
//     unknown issuer is refused before any signature is checked, and
//     problems with the issuer's setup (wrong audience, long lifetime)
//     are reported before the time checks, which a retry can change.
//   - Time: exp gets no leeway (go-oidc refuses a token from the second
//     after its exp); nbf and iat may be 30 s ahead (Leeway), where
//     go-oidc alone would allow 5 minutes of nbf. exp - iat is at most an
//     hour (MaxLifetime), and exp, iat and jti are required.
//   - Algorithms: RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA.
//     No HMAC and no "none"; a jwks_file with a symmetric or private key
//     is refused at New and Reload.
//   - A jwks_file's keys are tried in turn, whatever the token's kid
//     (go-oidc's StaticKeySet); discovery's remote key set matches kid.
//   - Keys age out (fresh.go): go-oidc's remote key set would keep a key
//     the issuer withdrew for as long as it lives, so once an issuer's
//     keys are its keys_max_age old (DefaultKeysMaxAge, 5 minutes), or
//     older than the key set response's Cache-Control max-age (less its
//     Age) if that is shorter, the next token gets a new remote key set
//     that fetches the jwks_uri again; a jwks_file is read again the
//     same way. A withdrawn key admits for at most that long after the
//     fetch or read that last served it. An issuer whose keys cannot be
//     fetched or read then admits nothing until they can (fail closed).
//   - A discovery issuer is not asked anything at New. Its first token
//     discovers it; a failure is remembered for 10 s, in which its tokens
//     fail at once with codes.JWTInvalid saying the issuer cannot be
//     discovered.
//   - The first rule whose claims match decides: if its name claim is
//     missing or not a valid node name, the token is refused, not tried
//     against the next rule.
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
package idtoken
