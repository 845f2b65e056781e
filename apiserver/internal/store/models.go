package store

import (
	"time"

	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// Workspace owns API keys, projects and usage (spec 1, 5.1.3).
type Workspace struct {
	ID                string    `gorm:"primaryKey" json:"id"`
	Name              string    `json:"name"`
	Plan              string    `json:"plan"`
	UsageBasedPricing bool      `json:"usageBasedPricing"`
	CreatedAt         time.Time `json:"createdAt"`
}

// User is a person who can hold API keys.
type User struct {
	ID    string `gorm:"primaryKey" json:"id"`
	Email string `json:"email"`
	// PasswordHash is the console password (argon2id PHC string; empty:
	// none set). Never sent.
	PasswordHash string    `json:"-"`
	CreatedAt    time.Time `json:"createdAt"`
}

// Membership puts a user in a workspace (spec 5.2.1) as RoleOwner or
// RoleMember; only owners manage keys and channels.
type Membership struct {
	WorkspaceID string    `gorm:"primaryKey" json:"workspaceId"`
	UserID      string    `gorm:"primaryKey" json:"userId"`
	Role        string    `json:"role"`
	CreatedAt   time.Time `json:"createdAt"`
}

// APIKey is a svc_sk_ key; only the hash of its secret part is stored.
type APIKey struct {
	ID          string     `gorm:"primaryKey" json:"id"`
	WorkspaceID string     `json:"workspaceId"`
	UserID      string     `json:"userId"`
	Name        string     `json:"name"`
	Prefix      string     `json:"prefix"`
	KeyHash     string     `json:"-"`
	CreatedAt   time.Time  `json:"createdAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt,omitempty"`
	RevokedAt   *time.Time `json:"revokedAt,omitempty"`
}

// UsageRecord is the metered usage of one completion request.
type UsageRecord struct {
	ID               int64     `gorm:"primaryKey;autoIncrement" json:"id"`
	RequestID        string    `json:"requestId"`
	WorkspaceID      string    `json:"workspaceId"`
	APIKeyID         *string   `json:"apiKeyId,omitempty"`
	ProjectID        *string   `json:"projectId,omitempty"`
	Model            string    `json:"model"`
	Deployment       string    `json:"deployment"` // provider/upstream_model that answered
	PromptTokens     int64     `json:"promptTokens"`
	CompletionTokens int64     `json:"completionTokens"`
	ReasoningTokens  int64     `json:"reasoningTokens"`
	CreditsMicro     int64     `json:"creditsMicro"`
	Streamed         bool      `json:"streamed"`
	CreatedAt        time.Time `json:"createdAt"`
}

// UsageWindow is the running credit counter of one plan window; times are
// unix milliseconds so one SQL statement can roll it on both dialects.
type UsageWindow struct {
	WorkspaceID  string `gorm:"primaryKey" json:"workspaceId"`
	WindowName   string `gorm:"primaryKey" json:"window"`
	StartedAt    int64  `json:"startedAtMs"`
	ResetsAt     int64  `json:"resetsAtMs"`
	CreditsMicro int64  `json:"creditsMicro"`
}

// Project is one agent workspace (spec 2.6).
type Project struct {
	ID                 string        `gorm:"primaryKey" json:"id"`
	WorkspaceID        string        `json:"workspaceId"`
	Name               string        `json:"name"`
	CloudSyncMode      syncmode.Mode `json:"cloudSyncMode"`
	PublishedCommitSHA string        `gorm:"column:published_commit_sha" json:"publishedCommitSha"`
	PublishedTag       string        `json:"publishedTag"`
	CreatedAt          time.Time     `json:"createdAt"`
	// SyncModeChangedAt is when set-sync-mode last changed the mode (nil:
	// never since migration 00008).
	SyncModeChangedAt *time.Time `json:"syncModeChangedAt,omitempty"`
}

// Checkpoint is a ProjectCheckpoint row: one per chat turn that writes files.
type Checkpoint struct {
	ID        string `gorm:"primaryKey" json:"id"`
	ProjectID string `json:"projectId"`
	CommitSHA string `gorm:"column:commit_sha" json:"commitSha"`
	ParentSHA string `gorm:"column:parent_sha" json:"parentSha,omitempty"`
	wire.CommitSummary
	Source      string     `json:"source"`
	Reconciled  bool       `json:"reconciled"`
	CommittedAt *time.Time `json:"committedAt,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	// Turn is the commit's turn number (docs/sync-modes.md §1).
	Turn *int64 `json:"turn,omitempty"`
}

// TableName maps Checkpoint to project_checkpoints.
func (Checkpoint) TableName() string { return "project_checkpoints" }

// Channel is a project's webhook channel configuration (spec 2.5).
type Channel struct {
	ID              string    `gorm:"primaryKey" json:"channelId"`
	ProjectID       string    `json:"projectId"`
	Secret          string    `json:"-"`
	CallbackHeaders string    `json:"callbackHeaders"`
	UpdatedAt       time.Time `json:"updatedAt"`
}
