package agent

import "github.com/meshd/meshd/enroll"

// A reusable enrolment key (issue 31) names no node: the join asks with
// no name, sends the machine's hostname (a key minted with
// --name-from-host gives it when it is a valid, free name) and takes the
// name the cluster gives from the answer.

// tokenKind is what the join's first step calls tok.
func tokenKind(tok enroll.Token) string {
	if tok.Key {
		return "enrolment key"
	}
	return "token"
}

// admits is whom tok admits, as the join's first step says it.
func admits(tok enroll.Token) string {
	if tok.Key {
		return "a machine the cluster names (" + tok.Name + "N or its hostname)"
	}
	return tok.Name
}

// requestName is the node name the enroll request names: the token's,
// none for a key.
func requestName(tok enroll.Token) string {
	if tok.Key {
		return ""
	}
	return tok.Name
}

// hostName is the hostname a key's join sends (lowercased, cut at the
// first dot), "" for a one-time token.
func hostName(tok enroll.Token) string {
	if !tok.Key {
		return ""
	}
	return defaultNodeName()
}
