package settings_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/settings"
)

// An SVC_ variable that no program reads refuses the start and names the
// nearest name; known names (a secret's _FILE too), non-SVC_ variables and
// the reserved prefixes pass; another program's variables (the pod's, the
// test harness's) pass and are returned, sorted.
func TestCheckEnviron(t *testing.T) {
	t.Parallel()
	known := append(settings.EnvNames(options()), "SVC_HTTP_ADDR", "SVC_DATA_DIR")
	for _, tc := range []struct {
		name        string
		environ     []string
		wantErr     []string // substrings of the error; nil: no error
		wantForeign string   // "NAME program, …"
	}{
		{name: "empty"},
		{name: "known and other variables", environ: []string{"PATH=/bin", "SVC_STORAGE=s3", "SVC_S3_ACCESS_KEY_FILE=/run/k",
			"SVC_HTTP_ADDR=:1", "HOME=/root", "T_NAME=x", "svc_storage=lowercase is not ours"}},
		{name: "reserved prefixes", environ: []string{"SVC_TEST_DATABASE_URL=postgres://", "SVC_TEST_PAUSE_AT=a",
			"SVC_BENCH_SCALE=2", "SVC_POD_WEBHOOK_SYNC_TIMEOUT=1s", "SVC_GUEST_LOG_LEVEL=debug"}},
		{name: "the test harness's", environ: []string{"SVC_MINIO_BIN=/m", "SVC_BIN_DIR=/b"},
			wantForeign: "SVC_BIN_DIR the test harness, SVC_MINIO_BIN the test harness"},
		{name: "another binary's, one environment for both", environ: []string{"SVC_STORAGE=s3", "SVC_WORKSPACE_DIR=/w", "SVC_DATABASE_URL=postgres://"},
			wantForeign: "SVC_DATABASE_URL apiserver, SVC_WORKSPACE_DIR podagent"},
		{name: "typo of another binary's", environ: []string{"SVC_DATABSE_URL=postgres://"},
			wantErr: []string{"SVC_DATABSE_URL (did you mean SVC_DATABASE_URL?)"}},
		{name: "typo", environ: []string{"SVC_STORGE=s3"}, wantErr: []string{"SVC_STORGE (did you mean SVC_STORAGE?)"}},
		{name: "typo of a secret file", environ: []string{"SVC_S3_SECRET_KEY_FIEL=/k"},
			wantErr: []string{"SVC_S3_SECRET_KEY_FIEL (did you mean SVC_S3_SECRET_KEY_FILE?)"}},
		{name: "_FILE of a plain setting", environ: []string{"SVC_S3_BUCKET_FILE=/b"}, wantErr: []string{"SVC_S3_BUCKET_FILE (did you mean SVC_S3_BUCKET?)"}},
		{name: "nothing near", environ: []string{"SVC_COMPLETELY_DIFFERENT=1"}, wantErr: []string{"SVC_COMPLETELY_DIFFERENT;"}},
		{name: "bare reserved prefix", environ: []string{"SVC_POD_=x"}, wantErr: []string{"SVC_POD_"}},
		{name: "every unknown one, sorted", environ: []string{"SVC_LOG_LEVLE=debug", "SVC_DATADIR=/d", "SVC_STORAGE=fs"},
			wantErr: []string{"SVC_DATADIR (did you mean SVC_DATA_DIR?), SVC_LOG_LEVLE (did you mean SVC_LOG_LEVEL?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			foreign, err := settings.CheckEnviron(tc.environ, known)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("refused a valid environment: %v", err)
				}
				var got []string
				for _, f := range foreign {
					got = append(got, f.Name+" "+f.Program)
				}
				if g := strings.Join(got, ", "); g != tc.wantForeign {
					t.Fatalf("other programs' variables %q, want %q", g, tc.wantForeign)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted an unknown SVC_ variable")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// EnvNames lists the SVC_ names of a table, a secret's _FILE too, and
// leaves out names without the prefix.
func TestEnvNames(t *testing.T) {
	t.Parallel()
	got := strings.Join(settings.EnvNames(options()), " ")
	for _, w := range []string{"SVC_LOG_LEVEL", "SVC_STORAGE", "SVC_S3_SECRET_KEY", "SVC_S3_SECRET_KEY_FILE"} {
		if !strings.Contains(got, w) {
			t.Errorf("EnvNames lacks %s: %s", w, got)
		}
	}
	if strings.Contains(got, "T_NAME") || strings.Contains(got, "SVC_S3_BUCKET_FILE") {
		t.Errorf("EnvNames has a name it should not: %s", got)
	}
}
