package pki

// NebulaGroups are the groups a node's Nebula certificate carries: its
// role first, then its node groups in the order they were given.
func NebulaGroups(r Role, nodeGroups []string) []string {
	return append([]string{string(r)}, nodeGroups...)
}
