package codes

// The path check (issue 29 item 5: `meshctl netcheck`, join --plan,
// join): OverlayUDPBlocked fails a join before its token is spent;
// the others are the check's lines, informational (1xx) or warnings
// (2xx).
const (
	OverlayUDPBlocked           Code = "X503530UDPBLK"
	NetcheckAnswered            Code = "X100531STUNOK"
	NetcheckNoAnswer            Code = "X200532STUNNA"
	NetcheckPortPreserving      Code = "X100533NATPPR"
	NetcheckEndpointIndependent Code = "X100534NATEIM"
	NetcheckSymmetric           Code = "X200535NATSYM"
	NetcheckMappingUnknown      Code = "X200536NATUNK"
	NetcheckDirect              Code = "X100537PTHDIR"
	NetcheckRelayed             Code = "X200538PTHRLY"
	NetcheckNoNAT               Code = "X100539NATNON"
	NetcheckUnreachable         Code = "X503540STUNDN"
	NetcheckNotServed           Code = "X200541STUNNS"
	NetcheckSlow                Code = "X200542UDPSLW"
)
