package webhookchannel

import "testing"

func TestDecodeCallbackHeaders(t *testing.T) {
	t.Parallel()
	for in, n := range map[string]int{"": 0, "{}": 0, "null": 0, `{"A":"b"}`: 1, `{"A":"b\r\nX: y"}`: 0} {
		got, err := DecodeCallbackHeaders(in)
		if err != nil || len(got) != n {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := DecodeCallbackHeaders(`[1]`); err == nil {
		t.Error("an array was accepted")
	}
}
