// Package krb5gss is the Kerberos V5 GSS-API mechanism (RFC 4121) on the
// initiator's side, for Basin's test clients that speak RPCSEC_GSS: the
// initial context token (an AP-REQ made with a gokrb5 client's service
// ticket, asking for mutual authentication), the check of the acceptor's
// AP-REP and its subkey, and the per-message tokens of the established
// Context: MIC, Wrap with integrity only, and Wrap with confidentiality
// (gokrb5 has no sealed Wrap token; this package makes and opens it with
// gokrb5's RFC 3961 encryption, key usages 22 and 24).
//
// Only the AES encryption types (RFC 3962, RFC 8009) are supported, as RFC
// 4121 defines its tokens for them; the older DES3 and RC4 tokens of RFC 1964
// are not. Tokens this side sends have a right rotation count of 0, and
// received tokens may have any.
//
// mit_test.go checks every token against MIT Kerberos's GSS-API, in both
// directions, with a throwaway MIT KDC on loopback.
//
// It imports nothing of Basin's.
package krb5gss
