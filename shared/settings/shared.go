package settings

import (
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
)

// LogOptions are SVC_LOG_LEVEL and SVC_LOG_FORMAT (shared/logging).
func LogOptions[C any](p func(*C) *logging.Options) []Option[C] {
	return []Option[C]{
		{Flag: "log-level", Env: "SVC_LOG_LEVEL", Def: "info", Usage: "debug, info, warn, error", Set: String(func(c *C) *string { return &p(c).Level })},
		{Flag: "log-format", Env: "SVC_LOG_FORMAT", Def: "json", Usage: "json, or console for people", Set: func(c *C, v string) error {
			if err := logging.ValidFormat(v); err != nil {
				return err
			}
			p(c).Format = v
			return nil
		}},
	}
}

// StorageOptions are SVC_STORAGE and SVC_S3_*, the object store every
// binary opens with objstore.Open (validate with objstore.Config.Validate).
func StorageOptions[C any](p func(*C) *objstore.Config) []Option[C] {
	return []Option[C]{
		{Flag: "storage", Env: "SVC_STORAGE", Def: objstore.FS, Usage: "object store backend: fs or s3", Set: String(func(c *C) *string { return &p(c).Backend })},
		{Flag: "s3-endpoint", Env: "SVC_S3_ENDPOINT", Usage: "S3 endpoint host:port", Set: String(func(c *C) *string { return &p(c).Endpoint })},
		{Flag: "s3-bucket", Env: "SVC_S3_BUCKET", Def: "svc", Usage: "S3 bucket", Set: String(func(c *C) *string { return &p(c).Bucket })},
		{Flag: "s3-access-key", Env: "SVC_S3_ACCESS_KEY", Secret: true, Usage: "S3 access key", Set: String(func(c *C) *string { return &p(c).AccessKey })},
		{Flag: "s3-secret-key", Env: "SVC_S3_SECRET_KEY", Secret: true, Usage: "S3 secret key", Set: String(func(c *C) *string { return &p(c).SecretKey })},
		{Flag: "s3-use-ssl", Env: "SVC_S3_USE_SSL", Def: "false", Usage: "use TLS to reach S3", Set: Bool(func(c *C) *bool { return &p(c).UseSSL })},
	}
}
