package state

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Each command's applyTo checks everything first and changes the state
// only once nothing can fail: a failed command changes nothing.

func (c Bootstrap) applyTo(s *Snapshot) error {
	if s.Cluster != nil {
		return codes.Wrap(codes.AlreadyInitialised, fmt.Errorf("cluster %s already exists", s.Cluster.ID))
	}
	cl, origin := c.Cluster.clone(), c.Origin.clone()
	if cl.ID == "" {
		return codes.Wrap(codes.BadRequest, errors.New("bootstrap: cluster without an id"))
	}
	if !cl.Overlay.IsValid() {
		return codes.Wrap(codes.BadRequest, errors.New("bootstrap: cluster without an overlay prefix"))
	}
	cl.Overlay = cl.Overlay.Masked()
	if origin.ID == "" {
		return codes.Wrap(codes.BadRequest, errors.New("bootstrap: origin without an id"))
	}
	if err := enroll.ValidName(origin.Name); err != nil {
		return err
	}
	switch origin.Role {
	case "":
		origin.Role = pki.RoleControl
	case pki.RoleControl:
	default:
		return codes.Wrap(codes.BadRole, fmt.Errorf("bootstrap: origin role %q, want control", origin.Role))
	}
	origin.OverlayIP = origin.OverlayIP.Unmap()
	if err := checkHost(cl.Overlay, origin.OverlayIP); err != nil {
		return err
	}
	if cl.Overlay6.IsValid() {
		if err := CheckOverlay6(cl.Overlay, cl.Overlay6); err != nil {
			return err
		}
		ip6 := Overlay6For(cl.Overlay, cl.Overlay6, origin.OverlayIP)
		if origin.OverlayIP6.IsValid() && origin.OverlayIP6 != ip6 {
			return codes.Wrap(codes.BadRequest, fmt.Errorf("bootstrap: origin's IPv6 overlay address %s, want %s", origin.OverlayIP6, ip6))
		}
		origin.OverlayIP6 = ip6
	} else if origin.OverlayIP6.IsValid() {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("bootstrap: origin's IPv6 overlay address %s in an IPv4-only cluster", origin.OverlayIP6))
	}

	if cl.Created.IsZero() {
		cl.Created = c.At
	}
	if cl.CAHolder == "" {
		cl.CAHolder = origin.ID
	}
	origin.State = NodeActive
	origin.Created, origin.Updated = c.At, c.At
	s.Cluster = &cl
	s.Nodes[origin.ID] = origin
	s.IPAM[origin.OverlayIP] = origin.ID
	s.audit(AuditEvent{Code: codes.EventClusterCreated, At: c.At, Actor: c.Actor, Subject: cl.Name,
		Detail: fmt.Sprintf("cluster %s, origin %s (%s) at %s", cl.ID, origin.Name, origin.ID, origin.OverlayIP)})
	return nil
}

func (c MintToken) applyTo(s *Snapshot) error {
	r := c.Record
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("mint token: no cluster yet"))
	}
	if _, dup := s.Tokens[r.Hash]; dup {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("mint token: hash %s already recorded", r.Hash))
	}
	if r.Hash == (enroll.TokenHash{}) {
		return codes.Wrap(codes.BadRequest, errors.New("mint token: no hash"))
	}
	if r.Role == pki.RoleNebula {
		if err := s.checkNebulaToken(r); err != nil {
			return err
		}
	} else if _, err := pki.ParseRole(string(r.Role)); err != nil {
		return err
	} else if r.Renew || r.CertLifetime != 0 {
		return codes.Wrap(codes.BadRequest, errors.New("mint token: renew and a certificate lifetime are for a stock Nebula member's token"))
	}
	if r.IsKey() {
		if err := s.checkKey(r); err != nil {
			return err
		}
	} else {
		if err := enroll.ValidName(r.Name); err != nil {
			return err
		}
		if err := enroll.CheckTTL(r.Expires.Sub(r.Created)); err != nil {
			return err
		}
	}
	if r.Ephemeral {
		if err := EphemeralAllowed(r.Role); err != nil {
			return err
		}
	}
	if err := pki.CheckNodeGroups(r.Groups); err != nil {
		return err
	}
	if c.Names && !r.IsKey() && !r.Renew {
		if h, held := s.nameHolder(r.Name, r.Created, r.Hash); held {
			return codes.Wrap(codes.NameTaken, fmt.Errorf("mint token: %s is held by %s", r.Name, h))
		}
	}
	if r.Addr != "" {
		if _, err := netip.ParseAddr(r.Addr); err != nil {
			return codes.Wrap(codes.BadRequest, fmt.Errorf("mint token: bound address %q: %w", r.Addr, err))
		}
	}
	if r.Consumed() || r.ConsumedBy != "" {
		return codes.Wrap(codes.BadRequest, errors.New("mint token: record is already consumed"))
	}
	if r.Revoked() || r.RevokedBy != "" {
		return codes.Wrap(codes.BadRequest, errors.New("mint token: record is already revoked"))
	}
	if len(r.Approval.Pending) > 0 || r.Approval.Wrong > 0 || r.Approval.IsApproved() || r.Approval.IsBurnt() {
		return codes.Wrap(codes.BadRequest, errors.New("mint token: record has an approval state already"))
	}

	s.Tokens[r.Hash] = r
	subject, detail := r.Name, ""
	if r.IsKey() {
		subject = r.Key.NamePrefix + "*"
		detail = fmt.Sprintf(", reusable key: %d uses", r.Key.Uses)
	}
	if r.Ephemeral {
		detail += ", ephemeral"
	}
	s.audit(AuditEvent{Code: codes.EventTokenMinted, At: cmp.Or(c.At, r.Created), Actor: c.Actor, Subject: subject,
		Detail: fmt.Sprintf("role %s, expires %s, hash %s%s", r.Role, r.Expires.UTC().Format("2006-01-02T15:04:05Z"), r.Hash, detail)})
	return nil
}

func (c Admit) applyTo(s *Snapshot) error {
	a, n := c.Admission, c.Node.clone()
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("admit: no cluster yet"))
	}
	if a.NodeID == "" || (n.ID != "" && n.ID != a.NodeID) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit: node id %q does not match admission %q", n.ID, a.NodeID))
	}
	rec, ok := s.Tokens[a.Token]
	ident := a.Identity != nil
	if ident {
		var err error
		if rec, err = s.identityRecord(a); err != nil {
			return err
		}
		ok = true
	}
	key := ok && rec.IsKey()
	// The id of a former node of the admitted name is its record, reused;
	// under a key, the record of a former node the same key admitted for
	// the same machine (enroll.KeyNodeID), which keeps the name it had.
	prior, dup := s.Nodes[a.NodeID]
	reusing := dup && prior.State.Former() && (prior.Name == a.Name || key && prior.Token == a.Token)
	if dup && !reusing {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit: node id %s already recorded", a.NodeID))
	}

	switch {
	case !ok:
		return codes.Wrap(codes.TokenUnknown, fmt.Errorf("admit %s: no record of token %s", a.Name, a.Token))
	case rec.Consumed():
		return codes.Wrap(codes.TokenConsumed, fmt.Errorf("admit %s: token consumed by %s", a.Name, rec.ConsumedBy))
	case rec.Revoked():
		return codes.Wrap(codes.TokenRevoked, fmt.Errorf("admit %s: token revoked at %s", a.Name, rec.RevokedAt.UTC().Format("2006-01-02T15:04:05Z")))
	case !a.At.Before(rec.Expires):
		return codes.Wrap(codes.TokenExpired, fmt.Errorf("admit %s: token expired at %s", a.Name, rec.Expires.UTC().Format("2006-01-02T15:04:05Z")))
	case rec.Exhausted():
		return codes.Wrap(codes.KeyExhausted, fmt.Errorf("admit: key %s has admitted %d of %d machines", shortHash(a.Token), rec.Key.Used, rec.Key.Uses))
	case rec.Approve && !rec.Approval.IsApproved():
		return codes.Wrap(codes.ApprovalNotPending, fmt.Errorf("admit %s: the token needs an operator's approval (`meshctl approve`), which it has not had", a.Name))
	case rec.Approve && rec.Approval.Approved.Key != "" && rec.Approval.Approved.Key != enroll.KeyHash(a.TLSPublicKey):
		return codes.Wrap(codes.ApprovalNotPending, fmt.Errorf("admit %s: the operator approved another joiner's key", a.Name))
	case !key && (a.Name != rec.Name || (n.Name != "" && n.Name != rec.Name)):
		return codes.Wrap(codes.TokenNameDiffer, fmt.Errorf("admit %q: token admits %q", a.Name, rec.Name))
	case key && (a.Name != "" || n.Name != ""):
		return codes.Wrap(codes.TokenNameDiffer, fmt.Errorf("admit %q: a key's joiners are named by the cluster", cmp.Or(a.Name, n.Name)))
	case (a.Role != "" && a.Role != rec.Role) || (n.Role != "" && n.Role != rec.Role):
		return codes.Wrap(codes.BadRole, fmt.Errorf("admit %s: token admits role %s", a.Name, rec.Role))
	}
	if rec.Addr != "" && !sameIP(rec.Addr, a.SourceAddr) {
		return codes.Wrap(codes.TokenWrongAddr, fmt.Errorf("admit %s: token bound to %s, join came from %s", a.Name, rec.Addr, a.SourceAddr))
	}
	ephemeral := rec.Ephemeral || a.Ephemeral || n.Ephemeral
	if ephemeral {
		if err := EphemeralAllowed(rec.Role); err != nil {
			return err
		}
	}
	name := rec.Name
	switch {
	case key && reusing:
		name = prior.Name
	case key:
		name = s.keyName(rec, a.HostName, c.Names, a.At)
	}
	if c.Names {
		if h, held := s.nameHolder(name, a.At, a.Token); held {
			return codes.Wrap(codes.NameTaken, fmt.Errorf("admit %s: name held by %s", name, h))
		}
	} else if other, taken := s.nodeByName(name); taken {
		return codes.Wrap(codes.NameTaken, fmt.Errorf("admit %s: name held by node %s (%s)", name, other.ID, other.State))
	}
	// An entry whose node carries certificate fingerprints is a v1
	// admission (signed before it was recorded, for an IP picked before):
	// it still applies as it did, so that logs written then replay to the
	// same state. Every admission since records the node as joining, with
	// no certificates, and RecordCerts makes it active.
	v1 := n.TLSFingerprint != "" || n.NebulaFingerprint != ""
	if !v1 {
		if err := checkJoining(name, rec.Role, a, &n); err != nil {
			return err
		}
	}
	if reusing && (v1 || (a.OverlayIP.IsValid() && a.OverlayIP.Addr().Unmap() != prior.OverlayIP) ||
		(n.OverlayIP.IsValid() && n.OverlayIP.Unmap() != prior.OverlayIP)) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: a reused record keeps its overlay IP %v", name, prior.OverlayIP))
	}
	if rec.Role == pki.RoleNebula {
		if err := s.nebulaKeyFree(name, a.NebulaPub, prior.ID); err != nil {
			return err
		}
	}
	ip := prior.OverlayIP
	if !reusing {
		var err error
		if ip, err = s.admitIP(name, a, n, v1); err != nil {
			return err
		}
	}

	n.ID, n.Name, n.Role, n.OverlayIP = a.NodeID, name, rec.Role, ip
	n.OverlayIP6 = s.overlay6Of(ip)
	n.Groups = slices.Clone(rec.Groups)
	n.Ephemeral = ephemeral
	n.State = NodeJoining
	if v1 {
		n.State = NodeActive
	}
	if n.Underlay == "" {
		n.Underlay = a.Underlay
	}
	if n.SeenFrom == "" {
		n.SeenFrom = a.SourceAddr // the NAT's public address when the joiner is behind one
	}
	n.Relay = n.Relay || a.Relay
	if n.NebulaPublicKey == nil {
		n.NebulaPublicKey = append([]byte(nil), a.NebulaPub...)
	}
	if n.Version == "" {
		n.Version = a.Version
	}
	n.Created, n.Updated = a.At, a.At
	if !v1 {
		n.Token = a.Token
	}
	detail := ""
	switch {
	case ident:
		id := a.Identity
		if s.JTIs == nil {
			s.JTIs = map[string]JTIUse{}
		}
		s.JTIs[id.JTI] = JTIUse{NodeID: n.ID, Expires: id.Expires, Undone: s.JTIs[id.JTI].Undone}
		detail = fmt.Sprintf(", by a JWT of %s for %s (rule %d)", id.Issuer, id.Subject, id.Rule)
	case key:
		rec.Key.Used++
		rec.Key.LastUsed = a.At
		detail = fmt.Sprintf(", key %s use %d of %d", shortHash(a.Token), rec.Key.Used, rec.Key.Uses)
	default:
		rec.ConsumedAt, rec.ConsumedBy = a.At, n.ID
	}
	if reusing {
		n = s.reuse(prior, n, a.At)
		detail += fmt.Sprintf(" (the record of the %s node reused; its certificates revoked)", prior.State)
	}

	if !ident {
		s.Tokens[a.Token] = rec
	}
	s.Nodes[n.ID] = n
	s.IPAM[ip] = n.ID
	s.audit(AuditEvent{Code: codes.EventNodeAdmitted, At: a.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s, role %s, overlay %s, underlay %s%s", n.ID, n.Role, ip, n.Underlay, detail)})
	return nil
}

func (c SetNodeState) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node with id %q", c.NodeID))
	}
	var event codes.Code
	switch c.State {
	case NodeActive:
		event = codes.EventNodeActive
	case NodeLeft:
		event = codes.EventNodeLeft
	case NodeRemoved:
		event = codes.EventNodeRemoved
	default:
		// joining is only ever a node's first state, set by Admit; failed
		// only FailJoin's.
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: cannot move to state %q", n.Name, c.State))
	}
	switch {
	case (n.State == NodeRemoved || n.State == NodeFailed) && c.State != NodeRemoved:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; it cannot become %s", n.Name, n.State, c.State))
	case c.State == NodeActive && n.State == NodeJoining:
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is joining; only its confirmed join (ConfirmJoin) makes it active", n.Name))
	case c.State == NodeActive && n.State.Former():
		// Its certificates are revoked: a former node comes back only by
		// a new admission, with new keys (the record reused).
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s is %s; it comes back only by a new admission", n.Name, n.State))
	case c.State.Former() && s.Cluster != nil && s.Cluster.CAHolder == n.ID:
		return codes.Wrap(codes.CAHolderStays, fmt.Errorf("node %s holds the CA", n.Name))
	case c.Keep != enroll.TokenHash{} && (c.State != NodeLeft || n.Role != pki.RoleControl):
		return codes.Wrap(codes.BadRequest, fmt.Errorf("node %s: only a control node that leaves keeps a token", n.Name))
	}

	detail := fmt.Sprintf("node %s", n.ID)
	if c.State.Former() {
		if n.State == c.State {
			// Asked again (`meshctl remove` of a former node): whatever is
			// not revoked yet is revoked now.
			detail += fmt.Sprintf(" (already %s; %d more certificates revoked)", c.State, s.revoke(n, c.At))
		}
		n.KeptToken = c.Keep
		n = s.depart(n, c.State, "", c.At, c.Actor)
	} else {
		n.Updated = c.At
		s.Nodes[n.ID] = n
	}
	s.audit(AuditEvent{Code: event, At: c.At, Actor: c.Actor, Subject: n.Name, Detail: detail})
	return nil
}

// nodeByName finds the node holding name, ignoring former nodes (left,
// removed, failed): they hold no name.
func (s *Snapshot) nodeByName(name string) (Node, bool) {
	for _, n := range s.Nodes {
		if n.Name == name && !n.State.Former() {
			return n, true
		}
	}
	return Node{}, false
}

// audit appends e to the ring, dropping the oldest event past AuditSize.
func (s *Snapshot) audit(e AuditEvent) {
	if len(s.Audit) < AuditSize {
		s.Audit = append(s.Audit, e)
		return
	}
	copy(s.Audit, s.Audit[1:])
	s.Audit[len(s.Audit)-1] = e
}

// sameIP compares two textual IP addresses; unparsable ones never match.
func sameIP(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	return err1 == nil && err2 == nil && x.Unmap().WithZone("") == y.Unmap().WithZone("")
}
