package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TemplateData are the fields of the runtime pod template (the chart's
// templates/_runtime-pod-template.tpl documents them), written "[[ .X ]]".
type TemplateData struct {
	PodName         string
	Namespace       string
	ProjectID       string
	WorkspaceID     string
	SyncMode        string
	TokenSecretName string
}

// PodTemplate renders the runtime pod of a project.
type PodTemplate struct {
	tmpl *template.Template
}

// LoadPodTemplate reads and parses SVC_RUNTIME_POD_TEMPLATE_FILE, and checks
// it by rendering it once: a broken template is a start-up error, not a 503
// on the first request.
func LoadPodTemplate(path string) (*PodTemplate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runtime pod template: %w", err)
	}
	return ParsePodTemplate(string(b))
}

// ParsePodTemplate parses a pod template text.
func ParsePodTemplate(text string) (*PodTemplate, error) {
	t, err := template.New("runtime-pod").Delims("[[", "]]").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("runtime pod template: %w", err)
	}
	pt := &PodTemplate{tmpl: t}
	pod, err := pt.Render(TemplateData{PodName: "svc-rt-check-1", Namespace: "default", ProjectID: "prj_check",
		WorkspaceID: "ws_check", SyncMode: "git_only", TokenSecretName: "svc-rt-check-1"})
	if err != nil {
		return nil, err
	}
	if _, err := sidecar(pod); err != nil {
		return nil, err
	}
	return pt, nil
}

// Render executes the template and decodes the result as a core/v1 Pod
// (unknown fields are an error, so a typo in the chart is not silently
// dropped).
func (pt *PodTemplate) Render(d TemplateData) (*corev1.Pod, error) {
	var buf bytes.Buffer
	if err := pt.tmpl.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("runtime pod template: %w", err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(buf.Bytes(), &pod); err != nil {
		return nil, fmt.Errorf("runtime pod template: decoding the rendered pod: %w", err)
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" {
		return nil, fmt.Errorf("runtime pod template: rendered %s/%s, want v1/Pod", pod.APIVersion, pod.Kind)
	}
	return &pod, nil
}

// PodagentContainer is the name of the podagent sidecar in the template.
const PodagentContainer = "podagent"

// sidecar finds the podagent container (a native sidecar: an init container
// with restartPolicy Always, or a plain container) and its port.
func sidecar(pod *corev1.Pod) (*corev1.Container, error) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == PodagentContainer {
				c := &list[i]
				if len(c.Ports) == 0 {
					return nil, fmt.Errorf("runtime pod template: the %q container declares no port", PodagentContainer)
				}
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("runtime pod template: no container named %q", PodagentContainer)
}

// setEnv sets name=value in c's environment, replacing an entry of the same
// name (a value or a valueFrom).
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// dnsLabel lowercases s and keeps [a-z0-9-], for pod names.
func dnsLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
