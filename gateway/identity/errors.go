package identity

import (
	"fmt"
	"strconv"
)

// Reasons a credential is refused (Failure.Reason). They are stable: logs,
// metrics and the 401's details.reason carry them.
const (
	ReasonMalformed           = "malformed"            // not a well-formed compact JWS/JWT
	ReasonAlgNotAllowed       = "alg_not_allowed"      // alg outside auth.jwt.algorithms (none, HS256, ...)
	ReasonTypNotAllowed       = "typ_not_allowed"      // a JWT of another kind (logout, security event)
	ReasonUnknownKey          = "unknown_key"          // no published key has the token's kid
	ReasonKeyMismatch         = "key_mismatch"         // the kid's key cannot verify the token's alg
	ReasonBadSignature        = "bad_signature"        // signature does not verify (tampered, forged)
	ReasonExpired             = "expired"              // exp is past (beyond leeway)
	ReasonNotYetValid         = "not_yet_valid"        // nbf or iat is in the future (beyond leeway)
	ReasonWrongIssuer         = "wrong_issuer"         // iss is not auth.jwt.issuer
	ReasonWrongAudience       = "wrong_audience"       // aud does not contain auth.jwt.audience
	ReasonMissingClaim        = "missing_claim"        // exp or the principal claim is absent
	ReasonBadClaim            = "bad_claim"            // a claim has the wrong type or shape
	ReasonReservedID          = "reserved_id"          // the token names a configured principal's id
	ReasonKeysUnavailable     = "keys_unavailable"     // the issuer's keys could not be fetched yet
	ReasonCertUnmapped        = "cert_unmapped"        // a verified client certificate names no principal
	ReasonCertAmbiguous       = "cert_ambiguous"       // it names more than one
	ReasonCertUntrusted       = "cert_untrusted"       // its CA was removed from tls.client_ca_file since the handshake
	ReasonMultipleCredentials = "multiple_credentials" // more than one Authorization header
)

// Failure is a refused credential. Message is for the client: it says what
// was wrong and never contains the credential. Unavailable marks a refusal
// that is the gateway's (the issuer's keys could not be fetched), answered
// 503 so the client retries, rather than the credential's (401).
type Failure struct {
	Reason      string
	Message     string
	Unavailable bool
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

func fail(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// quote renders an attacker-supplied value for a message: quoted, escaped,
// and cut to a readable length, so a header or claim cannot forge log or
// message structure.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}
