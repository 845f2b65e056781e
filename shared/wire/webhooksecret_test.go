package wire

import "testing"

func TestWebhookSecretMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		got        string
		candidates []string
		want       bool
	}{
		{"current", "whsec_a", []string{"whsec_a"}, true},
		{"replaced, in overlap", "whsec_old", []string{"whsec_new", "whsec_old"}, true},
		{"neither", "whsec_x", []string{"whsec_new", "whsec_old"}, false},
		{"prefix of a secret", "whsec_", []string{"whsec_a"}, false},
		{"empty candidates match nothing", "", []string{"", ""}, false},
		{"no candidates", "whsec_a", nil, false},
	} {
		if got := WebhookSecretMatches(tc.got, tc.candidates); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
