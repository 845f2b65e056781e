package shallow

import (
	"errors"
	"strings"
	"testing"
)

func TestCall(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		f       func() (int, error)
		want    int
		wantErr error
		panics  string
	}{
		{name: "value", f: func() (int, error) { return 7, nil }, want: 7},
		{name: "error", f: func() (int, error) { return 0, errBoom }, wantErr: errBoom},
		{name: "panic", f: func() (int, error) { panic("deep") }, panics: "deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				p := recover()
				if (p != nil) != (tt.panics != "") || (p != nil && !strings.Contains(p.(string), tt.panics)) {
					t.Fatalf("panic %v, want %q", p, tt.panics)
				}
			}()
			got, err := Call(tt.f)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Call = %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
