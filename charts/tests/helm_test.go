package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	// helmVersion is the pinned helm the Makefile installs (HELM_VERSION).
	helmVersion = "v3.22.0"
	chartDir    = "../svc"
	releaseName = "svc"
	namespace   = "svc"
	// kubeVersion pins .Capabilities.KubeVersion so golden files do not
	// depend on the helm build; the chart needs >= 1.29 (native sidecars).
	kubeVersion = "1.31.0"
)

// helmBin is $SVC_HELM_BIN (exported by the Makefile), else the Makefile's
// default tools path. A missing helm fails the test: chart tests never skip.
func helmBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("SVC_HELM_BIN")
	if bin == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no SVC_HELM_BIN and no home dir (%v): run `make tools`", err)
		}
		bin = filepath.Join(home, ".cache", "svc-tools", "helm", helmVersion, "helm")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("helm %s not found at %s: run `make tools` (it installs the pinned helm), or set SVC_HELM_BIN", helmVersion, bin)
	}
	return bin
}

// runHelm runs helm with a private home (no repositories, plugins or kube
// config of the machine leak in) and returns stdout, or an error carrying
// stderr.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"),
		"KUBECONFIG="+filepath.Join(dir, "kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart with the given values files and --set
// values (an entry starting with -- is passed as a raw flag).
func helmTemplate(t testing.TB, valuesFiles []string, sets ...string) (string, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		if strings.HasPrefix(s, "--") { // a raw flag
			args = append(args, s)
			continue
		}
		args = append(args, "--set", s)
	}
	return runHelm(t, args...)
}

func mustTemplate(t testing.TB, valuesFiles []string, sets ...string) string {
	t.Helper()
	out, err := helmTemplate(t, valuesFiles, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// object is one rendered manifest: its kind and name, and its YAML node for
// decoding into the partial types below.
type object struct {
	Kind string
	Name string
	node *yaml.Node
}

func (o object) decode(t testing.TB, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s/%s: %v", o.Kind, o.Name, err)
	}
}

// parseManifests splits helm's multi-document output.
func parseManifests(t testing.TB, out string) []object {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(out))
	var objs []object
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered output is not YAML: %v", err)
		}
		if len(n.Content) == 0 {
			continue // an empty document
		}
		var meta struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := n.Decode(&meta); err != nil {
			t.Fatalf("manifest: %v", err)
		}
		if meta.Kind == "" {
			t.Fatalf("manifest without kind:\n%s", out)
		}
		objs = append(objs, object{Kind: meta.Kind, Name: meta.Metadata.Name, node: &n})
	}
	return objs
}

func find(objs []object, kind string) []object {
	var r []object
	for _, o := range objs {
		if o.Kind == kind {
			r = append(r, o)
		}
	}
	return r
}

// named returns the element of xs whose name (as nameOf reads it) is name.
func named[T any](xs []T, name string, nameOf func(T) string) (T, bool) {
	for _, x := range xs {
		if nameOf(x) == name {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func findOne(t testing.TB, objs []object, kind string) object {
	t.Helper()
	got := find(objs, kind)
	if len(got) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(got))
	}
	return got[0]
}

// Partial Kubernetes types: only the fields the assertions read.

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name          string        `yaml:"name"`
	Image         string        `yaml:"image"`
	Command       []string      `yaml:"command"`
	Args          []string      `yaml:"args"`
	RestartPolicy string        `yaml:"restartPolicy"`
	Env           []envVar      `yaml:"env"`
	EnvFrom       []any         `yaml:"envFrom"`
	VolumeMounts  []volumeMount `yaml:"volumeMounts"`
	Ports         []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  *probe `yaml:"readinessProbe"`
	LivenessProbe   *probe `yaml:"livenessProbe"`
	StartupProbe    *probe `yaml:"startupProbe"`
	SecurityContext struct {
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

func (c container) mount(name string) (volumeMount, bool) {
	return named(c.VolumeMounts, name, func(m volumeMount) string { return m.Name })
}

type volume struct {
	Name     string `yaml:"name"`
	EmptyDir *struct {
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	Projected *struct {
		Sources []map[string]any `yaml:"sources"`
	} `yaml:"projected"`
}

type podSpec struct {
	ServiceAccountName            string      `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool       `yaml:"automountServiceAccountToken"`
	TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
	InitContainers                []container `yaml:"initContainers"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []volume    `yaml:"volumes"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
}

func (p podSpec) volume(name string) (volume, bool) {
	return named(p.Volumes, name, func(v volume) string { return v.Name })
}

func (p podSpec) allContainers() []container {
	return append(append([]container{}, p.InitContainers...), p.Containers...)
}

type deployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type pod struct {
	Metadata struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec podSpec `yaml:"spec"`
}

type configMap struct {
	Data map[string]string `yaml:"data"`
}
