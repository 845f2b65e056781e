package codecheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/wire/codecheck"
)

// Each way of stepping outside the one error vocabulary is reported, and
// the ways inside it are not.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      string // a substring of the one violation; "" for none
	}{
		{"declared code", `wire.Coded("fenced", "m")`, ""},
		{"code in a variable", `wire.Coded(code, "m")`, ""},
		{"literal without status", `&wire.Error{Code: "fenced", Message: "m", Cause: err}`, ""},
		{"relayed received status", `wire.Relayed(resp.StatusCode, wire.ErrorDetail{Code: "upstream_rejected"})`, ""},
		{"2xx beside a word", `c.JSON(http.StatusOK, "ok_done")`, ""},
		{"status from a response", `&agentloop.Error{Code: "gateway_error", Status: resp.StatusCode}`, ""},
		{"undeclared code", `wire.Coded("brand_new_code", "m")`, `"brand_new_code"`},
		{"undeclared code in a literal", `&Error{Code: "brand_new_code"}`, `"brand_new_code"`},
		{"undeclared code in a local helper", `badRequest("brand_new_code", "m")`, `"brand_new_code"`},
		{"inline status in a literal", `&wire.Error{Status: http.StatusConflict, Code: "fenced"}`, "Status chosen inline"},
		{"inline type in a literal", `&wire.Error{Type: wire.TypeServer, Code: "fenced"}`, "Type chosen inline"},
		{"status beside a code", `apierr.New(http.StatusConflict, apierr.TypeInvalidRequest, "fenced", "m")`, "status http.StatusConflict chosen beside code"},
		{"numeric status beside a code", `writeError(w, 418, "im_a_teapot", "m")`, "status 418 chosen beside code"},
		{"relayed constant", `wire.Relayed(http.StatusBadGateway, wire.ErrorDetail{Code: "agent_error"})`, "constant status"},
		{"plain-text error", `http.Error(w, "no", http.StatusForbidden)`, "plain-text http.Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			src := "package p\n\nfunc f() {\n\t_ = " + tc.src + "\n}\n"
			if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			// A test file with the same mistake is not the product's code.
			if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := codecheck.Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("reported %q", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "p.go:4:")):
				t.Fatalf("reported %q, want one line at p.go:4 with %q", got, tc.want)
			}
		})
	}
	t.Run("declared constant", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, "c.go"), []byte("package p\n\nconst (\n\tCodeOK = \"fenced\"\n\tCodeNew = \"brand_new_code\"\n)\n"), 0o644)
		if got, _ := codecheck.Check(dir); len(got) != 1 || !strings.Contains(got[0], "CodeNew") {
			t.Fatalf("reported %q", got)
		}
	})
	t.Run("skipped folder", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_ = os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
		_ = os.WriteFile(filepath.Join(dir, "a", "b", "p.go"), []byte("package b\n\nvar _ = http.Error\nfunc f() { http.Error(w, \"x\", 500) }\n"), 0o644)
		if got, _ := codecheck.Check(dir); len(got) != 1 {
			t.Fatalf("unskipped: %q", got)
		}
		if got, _ := codecheck.Check(dir, "a/b"); len(got) != 0 {
			t.Fatalf("skipped: %q", got)
		}
	})
}
