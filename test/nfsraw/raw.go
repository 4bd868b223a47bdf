package nfsraw

// Raw is any operation, given as its code and its XDR-encoded arguments (whole
// words). Its results are not decoded, so it must be the last operation of a
// COMPOUND; it lets an attack suite send operations this package does not model
// (COMMIT, OPEN, LOCK, LAYOUTGET, the NFSv4.2 operations …).
type Raw struct {
	Code uint32
	Args []byte
}

func (o *Raw) code() uint32     { return o.Code }
func (o *Raw) encode(e *xdrEnc) { e.Fixed(o.Args) }
func (o *Raw) decode(*xdrDec)   {}

// ClientID is the NFSv4.1 session's client ID (for open and lock owners); 0 for
// NFSv4.0, where this client never sets one up.
func (c *Client) ClientID() uint64 {
	if c.sess == nil {
		return 0
	}
	return c.sess.clientID
}

// Special stateids (RFC 8881 §8.2.3): the anonymous stateid (all zeros) and the
// READ bypass stateid (all ones).
var (
	AnonStateID   = [16]byte{}
	BypassStateID = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)
