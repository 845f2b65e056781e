// Package tests renders the svc chart with `helm template` for every values
// file in testdata/ and compares the output with testdata/<case>.golden
// (regenerate with `go test ./... -update`), runs `helm lint --strict`, and
// checks the properties operators rely on: no credential values in the
// output, the podagent native sidecar and its shutdown grace period, the
// runtime pod template's contract with the Kubernetes driver, and that the
// chart's default catalog and env names match the binaries.
package tests

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the rendered chart")

// valuesCases are the test values files, by case name (file name without .yaml).
func valuesCases(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.yaml values files")
	}
	cases := map[string]string{}
	for _, f := range files {
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = f
	}
	return cases
}

// expectations of the cases beyond the properties every case must have.
var expectations = map[string]struct {
	replicas                   int
	pdb, ingress, monitors     bool
	runtimeNamespace           string
	upstreamKey                bool
	minGracePeriod             int
	secretNames                []string // Secrets the API server mounts
	agentImagePrefix, apiImage string
}{
	"default": {replicas: 2, pdb: true, runtimeNamespace: namespace, minGracePeriod: 60,
		secretNames: []string{"svc-secrets"}, agentImagePrefix: "ghcr.io/svc-dev/svc-runtime:",
		apiImage: "ghcr.io/svc-dev/svc-apiserver:0.1.0"},
	"s3-existing-secrets": {replicas: 2, pdb: true, runtimeNamespace: "svc-runtime", upstreamKey: true, minGracePeriod: 90,
		secretNames:      []string{"svc-core", "svc-object-store", "svc-postgres-app", "svc-upstream"},
		agentImagePrefix: "registry.example.com/acme/agent-runtime:2026.02",
		apiImage:         "ghcr.io/svc-dev/svc-apiserver@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	"ingress-servicemonitor": {replicas: 2, pdb: true, ingress: true, monitors: true, runtimeNamespace: namespace, minGracePeriod: 60},
	"replicas-pdb":           {replicas: 3, pdb: true, runtimeNamespace: namespace, minGracePeriod: 60},
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for name, file := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			got := mustTemplate(t, []string{file})
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (create it with `go test ./... -update`)", err)
			}
			if string(want) != got {
				t.Errorf("rendered chart differs from %s (if the change is intended, run `go test ./... -update` and review the diff):\n%s",
					golden, lineDiff(string(want), got))
			}
		})
	}
}

func TestLintStrict(t *testing.T) {
	t.Parallel()
	t.Run("chart-defaults", func(t *testing.T) {
		if out, err := runHelm(t, "lint", "--strict", chartDir, "--namespace", namespace, "--kube-version", kubeVersion); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	for name, file := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			if out, err := runHelm(t, "lint", "--strict", chartDir, "--namespace", namespace, "--kube-version", kubeVersion, "--values", file); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// secretEnvs are the settings marked secret in the binaries' config (plus
// the pod's runtime token): they may only appear as <NAME>_FILE.
func secretEnvs(t *testing.T) map[string]bool {
	t.Helper()
	s := map[string]bool{}
	for _, files := range [][]string{apiOptionFiles, podOptionFiles} {
		for _, o := range configOptions(t, files...) {
			if o.secret {
				s[o.env] = true
			}
		}
	}
	for _, must := range []string{"SVC_DATABASE_URL", "SVC_S3_ACCESS_KEY", "SVC_S3_SECRET_KEY", "SVC_RUNTIME_AUTH_SECRET", "SVC_UPSTREAM_API_KEY", "SVC_RUNTIME_TOKEN"} {
		if !s[must] {
			t.Fatalf("%s is not a secret option in the config packages; update this test", must)
		}
	}
	return s
}

func TestNoCredentialValues(t *testing.T) {
	t.Parallel()
	secret := secretEnvs(t)
	for name, file := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			out := mustTemplate(t, []string{file})
			objs := parseManifests(t, out)
			if s := find(objs, "Secret"); len(s) > 0 {
				t.Errorf("the chart rendered %d Secret(s); credentials must come from existing Secrets", len(s))
			}
			check := func(where string, spec podSpec) {
				secretsMount := map[string]string{} // container → mount path of the secrets volume
				if v, ok := spec.volume("secrets"); ok {
					if v.Projected == nil {
						t.Errorf("%s: the secrets volume is not a projected volume", where)
					} else {
						for _, src := range v.Projected.Sources {
							if _, ok := src["secret"]; !ok || len(src) != 1 {
								t.Errorf("%s: the secrets volume projects something other than Secrets: %v", where, src)
							}
						}
					}
				}
				for _, c := range spec.allContainers() {
					if m, ok := c.mount("secrets"); ok {
						secretsMount[c.Name] = m.MountPath
						if !m.ReadOnly {
							t.Errorf("%s/%s: the secrets volume is mounted writable", where, c.Name)
						}
					}
					if len(c.EnvFrom) > 0 {
						t.Errorf("%s/%s: envFrom would hide which settings come from Secrets", where, c.Name)
					}
					for _, e := range c.Env {
						if secret[e.Name] {
							t.Errorf("%s/%s: secret %s is set as an env value; use %s_FILE", where, c.Name, e.Name, e.Name)
						}
						if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, "SVC_") {
							t.Errorf("%s/%s: %s comes from a secretKeyRef env; mount it as a file", where, c.Name, e.Name)
						}
						if base, ok := strings.CutSuffix(e.Name, "_FILE"); ok && secret[base] {
							dir, mounted := secretsMount[c.Name]
							if !mounted || !strings.HasPrefix(e.Value, dir+"/") {
								t.Errorf("%s/%s: %s=%q is not a file of the mounted secrets volume", where, c.Name, e.Name, e.Value)
							}
						}
					}
				}
			}
			var d deployment
			findOne(t, objs, "Deployment").decode(t, &d)
			check("Deployment", d.Spec.Template.Spec)
			p := runtimePod(t, objs, samplePod)
			check("runtime pod", p.Spec)

			// Which Secrets the API server reads.
			v, _ := d.Spec.Template.Spec.volume("secrets")
			var names []string
			for _, src := range v.Projected.Sources {
				n := src["secret"].(map[string]any)["name"].(string)
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			slices.Sort(names)
			if want := expectations[name].secretNames; want != nil && !slices.Equal(names, want) {
				t.Errorf("API server mounts Secrets %v, want %v", names, want)
			}
		})
	}
}

// podFields are the "[[ … ]]" fields the Kubernetes runtime driver fills
// into the runtime pod template (the contract in _runtime-pod-template.tpl).
type podFields struct {
	PodName, Namespace, ProjectID, SyncMode, TokenSecretName string
}

var samplePod = podFields{
	PodName: "svc-prj-abc234", Namespace: "tenant-ns", ProjectID: "prj_abc234",
	SyncMode: "git_only", TokenSecretName: "svc-prj-abc234-token",
}

// runtimePod renders the pod template the way the driver does.
func runtimePod(t *testing.T, objs []object, f podFields) pod {
	t.Helper()
	var cm configMap
	for _, o := range find(objs, "ConfigMap") {
		if strings.HasSuffix(o.Name, "-runtime-pod-template") {
			o.decode(t, &cm)
		}
	}
	src, ok := cm.Data["pod-template.yaml"]
	if !ok {
		t.Fatal("no runtime pod template ConfigMap with pod-template.yaml")
	}
	tpl, err := template.New("pod").Delims("[[", "]]").Option("missingkey=error").Parse(src)
	if err != nil {
		t.Fatalf("pod template does not parse with [[ ]] delimiters: %v", err)
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, f); err != nil {
		t.Fatalf("pod template: %v", err)
	}
	var p pod
	var kind struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
	}
	if err := yaml.Unmarshal(buf.Bytes(), &kind); err != nil || kind.Kind != "Pod" || kind.APIVersion != "v1" {
		t.Fatalf("rendered pod template is not a v1 Pod (%v):\n%s", err, buf.String())
	}
	if err := yaml.Unmarshal(buf.Bytes(), &p); err != nil {
		t.Fatalf("rendered pod template: %v", err)
	}
	return p
}

func TestRuntimePodTemplate(t *testing.T) {
	t.Parallel()
	for name, file := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			exp := expectations[name]
			objs := parseManifests(t, mustTemplate(t, []string{file}))
			for _, mode := range []string{"s3", "dual_shadow", "git_only"} {
				f := samplePod
				f.SyncMode = mode
				p := runtimePod(t, objs, f)
				if p.Metadata.Name != f.PodName || p.Metadata.Namespace != f.Namespace || p.Metadata.Labels["svc.dev/project-id"] != f.ProjectID {
					t.Errorf("pod metadata %+v does not carry the driver's name, namespace and project label", p.Metadata)
				}
				spec := p.Spec

				// Spec 8 / 10.2: podagent drains, flushes git (5 s) and S3
				// (10 s) after SIGTERM; the grace period must cover that.
				if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 20 || *g < exp.minGracePeriod {
					t.Errorf("terminationGracePeriodSeconds = %v, want >= max(20, %d)", g, exp.minGracePeriod)
				}
				if a := spec.AutomountServiceAccountToken; a == nil || *a {
					t.Error("runtime pods must not mount a ServiceAccount token")
				}
				if r := spec.SecurityContext.RunAsNonRoot; r == nil || !*r {
					t.Error("runtime pods must run as non-root")
				}

				// podagent is a native sidecar.
				if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "podagent" {
					t.Fatalf("want the podagent sidecar as the only initContainer, got %d", len(spec.InitContainers))
				}
				pa := spec.InitContainers[0]
				if pa.RestartPolicy != "Always" {
					t.Errorf("podagent restartPolicy = %q, want Always (native sidecar)", pa.RestartPolicy)
				}
				if !slices.Equal(pa.Args, []string{"serve"}) {
					t.Errorf("podagent args = %v, want [serve]", pa.Args)
				}
				if pa.StartupProbe == nil || pa.StartupProbe.HTTPGet.Path != "/healthz" ||
					pa.ReadinessProbe == nil || pa.ReadinessProbe.HTTPGet.Path != "/readyz" ||
					pa.LivenessProbe == nil || pa.LivenessProbe.HTTPGet.Path != "/healthz" {
					t.Error("podagent needs a startup probe (/healthz: workspace restored), readiness /readyz and liveness /healthz")
				}
				env := map[string]string{}
				for _, e := range pa.Env {
					env[e.Name] = e.Value
				}
				want := map[string]string{
					"SVC_CLOUD_SYNC_MODE": mode,
					"SVC_PROJECT_ID":      f.ProjectID,
					"SVC_API_URL":         "http://svc.svc.svc:80",
					"SVC_STORAGE":         "s3",
					"SVC_HTTP_ADDR":       ":8081",
				}
				for k, v := range want {
					if env[k] != v {
						t.Errorf("podagent %s = %q, want %q", k, env[k], v)
					}
				}
				// podagent is stopped after the agent container, within the
				// same grace period: it plans for what the agent leaves.
				if g := spec.TerminationGracePeriodSeconds; g != nil && env["SVC_SHUTDOWN_GRACE"] != fmt.Sprintf("%ds", *g-5) {
					t.Errorf("podagent SVC_SHUTDOWN_GRACE = %q, want terminationGracePeriodSeconds (%d) minus the agent's 5 s", env["SVC_SHUTDOWN_GRACE"], *g)
				}
				for _, k := range []string{"SVC_RUNTIME_TOKEN_FILE", "SVC_WORKSPACE_DIR", "SVC_S3_ENDPOINT", "SVC_S3_BUCKET", "SVC_S3_ACCESS_KEY_FILE", "SVC_S3_SECRET_KEY_FILE"} {
					if env[k] == "" {
						t.Errorf("podagent has no %s", k)
					}
				}
				// The token file comes from the driver's per-project Secret.
				v, _ := spec.volume("secrets")
				tokenFromDriver := false
				for _, src := range v.Projected.Sources {
					s := src["secret"].(map[string]any)
					if s["name"] == f.TokenSecretName {
						for _, it := range s["items"].([]any) {
							it := it.(map[string]any)
							tokenFromDriver = tokenFromDriver || (it["key"] == "token" && "/etc/svc/secrets/"+it["path"].(string) == env["SVC_RUNTIME_TOKEN_FILE"])
						}
					}
				}
				if !tokenFromDriver {
					t.Errorf("SVC_RUNTIME_TOKEN_FILE=%q is not the key \"token\" of Secret %s", env["SVC_RUNTIME_TOKEN_FILE"], f.TokenSecretName)
				}

				// The agent shares the workspace and holds no credentials.
				if len(spec.Containers) != 1 || spec.Containers[0].Name != "agent" {
					t.Fatalf("want one agent container, got %d", len(spec.Containers))
				}
				ag := spec.Containers[0]
				if !strings.HasPrefix(ag.Image, exp.agentImagePrefix) {
					t.Errorf("agent image %q, want prefix %q", ag.Image, exp.agentImagePrefix)
				}
				wsPod, okPod := pa.mount("workspace")
				wsAgent, okAgent := ag.mount("workspace")
				if w, _ := spec.volume("workspace"); !okPod || !okAgent || w.EmptyDir == nil || wsPod.MountPath != wsAgent.MountPath || env["SVC_WORKSPACE_DIR"] != wsPod.MountPath {
					t.Errorf("the workspace emptyDir must be mounted in both containers at SVC_WORKSPACE_DIR=%q", env["SVC_WORKSPACE_DIR"])
				}
				if _, ok := ag.mount("secrets"); ok {
					t.Error("the agent container mounts the secrets volume")
				}
				for _, e := range ag.Env {
					if e.ValueFrom != nil || strings.HasSuffix(e.Name, "_FILE") || e.Name == "SVC_RUNTIME_TOKEN" {
						t.Errorf("the agent container gets credential env %s", e.Name)
					}
				}
			}
		})
	}
}

func TestAPIServer(t *testing.T) {
	t.Parallel()
	for name, file := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			exp, known := expectations[name]
			objs := parseManifests(t, mustTemplate(t, []string{file}))
			var d deployment
			findOne(t, objs, "Deployment").decode(t, &d)
			spec := d.Spec.Template.Spec
			if known && d.Spec.Replicas != exp.replicas {
				t.Errorf("replicas = %d, want %d", d.Spec.Replicas, exp.replicas)
			}
			if r := spec.SecurityContext.RunAsNonRoot; r == nil || !*r {
				t.Error("the API server must run as non-root")
			}
			if len(spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(spec.Containers))
			}
			c := spec.Containers[0]
			if !slices.Equal(c.Args, []string{"serve"}) {
				t.Errorf("args = %v, want [serve]", c.Args)
			}
			if exp.apiImage != "" && c.Image != exp.apiImage {
				t.Errorf("image = %q, want %q", c.Image, exp.apiImage)
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Error("want readiness /readyz and liveness /healthz")
			}
			if ro := c.SecurityContext.ReadOnlyRootFilesystem; ro == nil || !*ro {
				t.Error("the API server's root filesystem must be read-only")
			}
			if c.Resources.Requests["cpu"] == "" || c.Resources.Limits["memory"] == "" {
				t.Error("the API server needs cpu requests and a memory limit")
			}
			if v, ok := spec.volume("data"); !ok || v.EmptyDir == nil {
				t.Error("the data dir must be an emptyDir")
			}
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "migrate" || !slices.Equal(spec.InitContainers[0].Args, []string{"migrate"}) {
				t.Error("want the migrate init container running `apiserver migrate`")
			} else if !reflect.DeepEqual(spec.InitContainers[0].Env, c.Env) {
				t.Error("migrate and serve must see the same settings")
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			for k, v := range map[string]string{"SVC_STORAGE": "s3", "SVC_RUNTIME_DRIVER": "kubernetes", "SVC_HTTP_ADDR": ":8080",
				"SVC_MODELS_FILE": "/etc/svc/catalog/models.yaml", "SVC_PLANS_FILE": "/etc/svc/catalog/plans.yaml",
				"SVC_RUNTIME_POD_TEMPLATE_FILE": "/etc/svc/runtime/pod-template.yaml", "SVC_RUNTIME_NAMESPACE": exp.runtimeNamespace} {
				if known && env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			if _, has := env["SVC_UPSTREAM_API_KEY_FILE"]; known && has != exp.upstreamKey {
				t.Errorf("SVC_UPSTREAM_API_KEY_FILE set = %v, want %v", has, exp.upstreamKey)
			}
			if m, ok := c.mount("catalog"); !ok || !strings.HasPrefix(env["SVC_MODELS_FILE"], m.MountPath+"/") {
				t.Error("SVC_MODELS_FILE is not in the mounted catalog ConfigMap")
			}

			// The driver's RBAC: exactly pods and secrets in the runtime namespace.
			role := findOne(t, objs, "Role")
			var r struct {
				Metadata struct{ Namespace string }
				Rules    []struct {
					Resources []string
					Verbs     []string
				}
			}
			role.decode(t, &r)
			var resources []string
			for _, rule := range r.Rules {
				resources = append(resources, rule.Resources...)
				if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") {
					t.Error("the runtime driver's Role must not use wildcards")
				}
			}
			slices.Sort(resources)
			if !slices.Equal(resources, []string{"pods", "secrets"}) {
				t.Errorf("the runtime driver's Role grants %v, want exactly pods and secrets", resources)
			}
			if known && r.Metadata.Namespace != exp.runtimeNamespace {
				t.Errorf("Role namespace %q, want %q", r.Metadata.Namespace, exp.runtimeNamespace)
			}

			if !known {
				return
			}
			if got := len(find(objs, "PodDisruptionBudget")) == 1; got != exp.pdb {
				t.Errorf("PodDisruptionBudget rendered = %v, want %v", got, exp.pdb)
			}
			if got := len(find(objs, "Ingress")) == 1; got != exp.ingress {
				t.Errorf("Ingress rendered = %v, want %v", got, exp.ingress)
			}
			if got := len(find(objs, "ServiceMonitor")) == 1 && len(find(objs, "PodMonitor")) == 1; got != exp.monitors {
				t.Errorf("monitors rendered = %v, want %v", got, exp.monitors)
			}
		})
	}
}

// The PDB of the replicas case keeps two of three replicas up, and no PDB
// blocks node drains of a single replica.
func TestPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	objs := parseManifests(t, mustTemplate(t, []string{"testdata/replicas-pdb.yaml"}))
	var pdb struct {
		Spec map[string]any `yaml:"spec"`
	}
	findOne(t, objs, "PodDisruptionBudget").decode(t, &pdb)
	if pdb.Spec["minAvailable"] != 2 || pdb.Spec["maxUnavailable"] != nil {
		t.Errorf("PDB spec %v, want minAvailable 2 only", pdb.Spec)
	}
	objs = parseManifests(t, mustTemplate(t, nil, "apiserver.replicaCount=1"))
	if n := len(find(objs, "PodDisruptionBudget")); n != 0 {
		t.Errorf("a single replica got %d PodDisruptionBudget(s)", n)
	}
}

// The chart's default models and plans are the binary's built-in ones.
func TestCatalogDefaultsMatchBinary(t *testing.T) {
	t.Parallel()
	objs := parseManifests(t, mustTemplate(t, nil))
	var cm configMap
	for _, o := range find(objs, "ConfigMap") {
		if strings.HasSuffix(o.Name, "-catalog") {
			o.decode(t, &cm)
		}
	}
	for file, key := range map[string]string{"default_models.yaml": "models.yaml", "default_plans.yaml": "plans.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../apiserver/internal/catalog", file))
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal([]byte(cm.Data[key]), &got); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("values %s differs from apiserver/internal/catalog/%s; keep the chart's defaults in sync", key, file)
		}
	}
}

type configOption struct {
	env    string
	secret bool
}

// The option tables (shared/settings, one option a line) each binary
// reads: its own, the shared log and storage settings and, for the pod, the
// webhook channel's.
var (
	apiOptionFiles = []string{"../../apiserver/internal/config/config.go", "../../shared/settings/shared.go"}
	podOptionFiles = []string{"../../podagent/internal/config/config.go", "../../podagent/internal/webhook/settings.go",
		"../../shared/settings/shared.go"}
)

// configOptions reads the option tables of files.
func configOptions(t *testing.T, files ...string) []configOption {
	t.Helper()
	envRe := regexp.MustCompile(`\bEnv:\s*"([A-Z0-9_]+)"`)
	secretRe := regexp.MustCompile(`\bSecret:\s*true`)
	var opts []configOption
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "Env: syncmode.EnvVar") {
				opts = append(opts, configOption{env: "SVC_CLOUD_SYNC_MODE"})
				continue
			}
			if m := envRe.FindStringSubmatch(line); m != nil {
				opts = append(opts, configOption{env: m[1], secret: secretRe.MatchString(line)})
			}
		}
	}
	if len(opts) < 10 {
		t.Fatalf("%v: found only %d options; update configOptions", files, len(opts))
	}
	return opts
}

// Every SVC_ setting the chart passes is one the binary reads (a typo would
// be silently ignored), except the Kubernetes driver's settings that the
// chart defines ahead of the driver.
func TestEnvNamesKnownToBinaries(t *testing.T) {
	t.Parallel()
	pending := map[string]bool{
		// Read by the Kubernetes runtime driver of the API server.
		"SVC_RUNTIME_NAMESPACE":         true,
		"SVC_RUNTIME_POD_TEMPLATE_FILE": true,
		// docs/design.md §5: passed to pods; podagent's callback sender reads it.
		"SVC_CALLBACK_ALLOWED_NETS": true,
	}
	known := func(files []string) map[string]bool {
		k := map[string]bool{}
		for _, o := range configOptions(t, files...) {
			k[o.env] = true
			if o.secret {
				k[o.env+"_FILE"] = true
			}
		}
		return k
	}
	apiKnown := known(apiOptionFiles)
	podKnown := known(podOptionFiles)
	objs := parseManifests(t, mustTemplate(t, []string{"testdata/s3-existing-secrets.yaml"}))
	var d deployment
	findOne(t, objs, "Deployment").decode(t, &d)
	p := runtimePod(t, objs, samplePod)
	for _, tc := range []struct {
		where string
		c     container
		known map[string]bool
	}{
		{"apiserver", d.Spec.Template.Spec.Containers[0], apiKnown},
		{"podagent", p.Spec.InitContainers[0], podKnown},
	} {
		for _, e := range tc.c.Env {
			if (strings.HasPrefix(e.Name, "SVC_") || e.Name == "LARGE_FILE_BYTES") && !tc.known[e.Name] && !pending[e.Name] {
				t.Errorf("%s: %s is not a setting of the binary", tc.where, e.Name)
			}
		}
	}
}

// Values the chart must refuse, and why (the schema or a template guard).
func TestRejectsUnsafeValues(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		sets []string
		want string
	}{
		"grace period below the shutdown flushes (schema)": {[]string{"runtime.terminationGracePeriodSeconds=15"}, "/runtime/terminationGracePeriodSeconds"},
		"grace period below the shutdown flushes (template)": {[]string{"--skip-schema-validation", "runtime.terminationGracePeriodSeconds=15"},
			"runtime.terminationGracePeriodSeconds must be at least 21"},
		"agent stop leaves podagent less than its flushes": {[]string{"runtime.terminationGracePeriodSeconds=25", "runtime.agent.stopSeconds=6"},
			"runtime.terminationGracePeriodSeconds minus runtime.agent.stopSeconds must be at least 21"},
		"negative agent stop time":           {[]string{"runtime.agent.stopSeconds=-1"}, "/runtime/agent/stopSeconds"},
		"no Secret to read credentials from": {[]string{"secrets.existingSecret="}, "the chart never holds credentials"},
		"S3 endpoint with a scheme":          {[]string{"s3.endpoint=https://s3.example.com"}, "/s3/endpoint"},
		"both PDB bounds":                    {[]string{"apiserver.replicaCount=3", "apiserver.pdb.minAvailable=2", "apiserver.pdb.maxUnavailable=1"}, "set only one of minAvailable and maxUnavailable"},
		"inline credential value":            {[]string{"secrets.databaseURL.value=postgres://u:p@db/svc"}, "additional properties 'value' not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helmTemplate(t, nil, tc.sets...)
			if err == nil {
				t.Fatalf("helm template %v succeeded; want a refusal. Output:\n%.400s", tc.sets, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused for another reason than %q:\n%v", tc.want, err)
			}
		})
	}
}

// NOTES.txt tells how to reach the completions endpoint. helm template does
// not render NOTES, so a copy of the chart renders it through tpl.
func TestNotes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "svc")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.src"), notes, 0o644); err != nil {
		t.Fatal(err)
	}
	render := "kind: Notes\ntext: |\n{{ tpl (.Files.Get \"notes.src\") . | indent 2 }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes.yaml"), []byte(render), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file string
		want []string
	}{
		"default": {"testdata/default.yaml", []string{"port-forward svc/svc 8080:80", "curl -sS http://127.0.0.1:8080/v1/chat/completions",
			"Authorization: Bearer $API_KEY", `"model": "svc-2-0"`, "built-in dev", "svc-secrets/database-url"}},
		"ingress": {"testdata/ingress-servicemonitor.yaml", []string{"curl -sS https://api.svc.example.com/v1/chat/completions"}},
		"secrets": {"testdata/s3-existing-secrets.yaml", []string{"svc-postgres-app/uri", "svc-upstream/api-key", "namespace svc-runtime"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, "template", releaseName, dir, "--namespace", namespace, "--kube-version", kubeVersion,
				"--show-only", "templates/zz-notes.yaml", "--values", tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct{ Text string }
			if err := yaml.Unmarshal([]byte(strings.TrimPrefix(out, "---\n")), &doc); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(doc.Text, w) {
					t.Errorf("NOTES lack %q:\n%s", w, doc.Text)
				}
			}
		})
	}
}

// lineDiff is a short line-oriented report of the first differences.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  golden: %s\n  render: %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
