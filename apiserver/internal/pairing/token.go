package pairing

import "github.com/svc-dev/svc/apiserver/internal/apikey"

// TokenPrefix starts every pairing token: svc_pt_<id>_<secret>, minted and
// checked like API keys (package apikey): the id finds the row, only the
// SHA-256 of the secret is stored.
const TokenPrefix = "svc_pt_"

var tokenKind = apikey.Kind{Prefix: TokenPrefix, RowPrefix: "pair_"}

// Token is a freshly minted pairing token; Plain is shown once.
type Token = apikey.Key

// NewToken mints a pairing token.
func NewToken() Token { return tokenKind.New() }

// ParseToken splits a presented token into its row id and secret.
func ParseToken(plain string) (rowID, secret string, ok bool) { return tokenKind.Parse(plain) }

func matches(secret, storedHash string) bool { return apikey.Matches(secret, storedHash) }
