package wire

//go:generate go run ./internal/gencodes

import "net/http"

// CodeSpec is one row of the code table: the HTTP status and type word a
// code is always answered with, and the message used when the error gives
// none.
type CodeSpec struct {
	Status  int
	Type    string
	Message string
}

// Codes is the one table of error codes (spec 2.3, 7.1; docs/errors.md):
// every code either binary answers is declared here, once, with its status
// and type. A code means the same status whichever binary answers it (a
// webhook caller sees the pod's codes through the API's agent-proxy).
// Business code returns Coded(code, message); nothing else in a binary
// chooses a status, except Relayed for an answer received from elsewhere.
// TestCodeTable and codecheck (run by each module's tests over its source)
// keep it so.
var Codes = map[string]CodeSpec{
	// Authentication (401).
	"invalid_api_key":        {http.StatusUnauthorized, TypeAuthentication, "Invalid API key."},
	"invalid_runtime_token":  {http.StatusUnauthorized, TypeAuthentication, "Missing or invalid runtime token."},
	"invalid_pairing_token":  {http.StatusUnauthorized, TypeAuthentication, "Invalid pairing token."},
	"unauthenticated":        {http.StatusUnauthorized, TypeAuthentication, "Sign in first."},
	"unauthorized":           {http.StatusUnauthorized, TypeAuthentication, "A valid token is required."},
	"channel_secret_not_set": {http.StatusUnauthorized, TypeAuthentication, "The channel has no secret set."},
	"invalid_webhook_secret": {http.StatusUnauthorized, TypeAuthentication, "Invalid webhook secret."},

	// Billing (402; and the plan matters answered 403 with the billing type,
	// docs/design.md §6).
	"usage_limit_reached":   {http.StatusPaymentRequired, TypeBilling, "Usage limit reached."},
	"key_budget_exceeded":   {http.StatusPaymentRequired, TypeBilling, "The API key's budget is spent."},
	"model_tier_restricted": {http.StatusForbidden, TypeBilling, "Your plan does not include this model's tier."},
	"plan_not_found":        {http.StatusForbidden, TypeBilling, "Your workspace's plan is not offered by this server."},

	// Permission (403).
	"csrf_failed":            {http.StatusForbidden, TypePermission, "Missing or invalid CSRF token."},
	"owner_required":         {http.StatusForbidden, TypePermission, "Only a workspace owner may do this."},
	"project_access_denied":  {http.StatusForbidden, TypePermission, "No access to this project."},
	"runtime_token_required": {http.StatusForbidden, TypePermission, "This route takes the project's runtime token."},
	"push_refused":           {http.StatusForbidden, TypePermission, "Push refused."},
	"forbidden":              {http.StatusForbidden, TypePermission, "Forbidden."},
	"signature_invalid":      {http.StatusForbidden, TypePermission, "The presigned URL's signature does not match."},
	"url_expired":            {http.StatusForbidden, TypePermission, "The presigned URL has expired."},
	"callback_target_refused": {http.StatusForbidden, TypePermission,
		"The callback target is refused (not a public http(s) address)."},

	// Rate limits (429).
	"rate_limited":          {http.StatusTooManyRequests, TypeRateLimit, "Too many requests."},
	"upstream_rate_limited": {http.StatusTooManyRequests, TypeRateLimit, "The model provider is rate limiting; retry later."},
	"key_budget_reserved":   {http.StatusTooManyRequests, TypeRateLimit, "The API key's budget is reserved by requests in flight."},

	// Not found (404).
	"not_found":            {http.StatusNotFound, TypeInvalidRequest, "Not found."},
	"model_not_found":      {http.StatusNotFound, TypeInvalidRequest, "The model does not exist."},
	"workspace_not_found":  {http.StatusNotFound, TypeInvalidRequest, "No such workspace."},
	"key_not_found":        {http.StatusNotFound, TypeInvalidRequest, "No such API key."},
	"key_budget_not_found": {http.StatusNotFound, TypeInvalidRequest, "The API key has no budget."},
	"project_not_found":    {http.StatusNotFound, TypeInvalidRequest, "No such project."},
	"repository_not_found": {http.StatusNotFound, TypeInvalidRequest, "The project has no repository."},
	"channel_not_found":    {http.StatusNotFound, TypeInvalidRequest, "No such channel."},
	"commit_not_found":     {http.StatusNotFound, TypeInvalidRequest, "No such commit."},
	"message_not_found":    {http.StatusNotFound, TypeInvalidRequest, "No such message."},
	"object_not_found":     {http.StatusNotFound, TypeInvalidRequest, "Object does not exist."},

	// Other refusals of the request (4xx, invalid_request_error).
	"bad_request":                     {http.StatusBadRequest, TypeInvalidRequest, "Bad request."},
	"invalid_request":                 {http.StatusBadRequest, TypeInvalidRequest, "Invalid request."},
	"invalid_body":                    {http.StatusBadRequest, TypeInvalidRequest, "Invalid request body."},
	"invalid_json":                    {http.StatusBadRequest, TypeInvalidRequest, "The body is not valid JSON."},
	"invalid_content_type":            {http.StatusBadRequest, TypeInvalidRequest, "Content-Type must be application/json."},
	"invalid_name":                    {http.StatusBadRequest, TypeInvalidRequest, "Invalid name."},
	"invalid_budget":                  {http.StatusBadRequest, TypeInvalidRequest, "Invalid budget."},
	"invalid_limit":                   {http.StatusBadRequest, TypeInvalidRequest, "Invalid limit."},
	"invalid_cursor":                  {http.StatusBadRequest, TypeInvalidRequest, "Invalid cursor."},
	"invalid_wait":                    {http.StatusBadRequest, TypeInvalidRequest, "Invalid wait."},
	"invalid_model":                   {http.StatusBadRequest, TypeInvalidRequest, "Invalid model."},
	"invalid_messages":                {http.StatusBadRequest, TypeInvalidRequest, "Invalid messages."},
	"invalid_message":                 {http.StatusBadRequest, TypeInvalidRequest, "Invalid message."},
	"missing_message":                 {http.StatusBadRequest, TypeInvalidRequest, "'message' is required."},
	"invalid_metadata":                {http.StatusBadRequest, TypeInvalidRequest, "Invalid metadata."},
	"invalid_sender_id":               {http.StatusBadRequest, TypeInvalidRequest, "'senderId' must be a string."},
	"invalid_sender_name":             {http.StatusBadRequest, TypeInvalidRequest, "'senderName' must be a string."},
	"invalid_callback_url":            {http.StatusBadRequest, TypeInvalidRequest, "'callbackUrl' is not usable."},
	"callback_url_refused":            {http.StatusBadRequest, TypeInvalidRequest, "'callbackUrl' is refused."},
	"invalid_stream":                  {http.StatusBadRequest, TypeInvalidRequest, "Invalid stream."},
	"invalid_stream_options":          {http.StatusBadRequest, TypeInvalidRequest, "Invalid stream_options."},
	"invalid_max_tokens":              {http.StatusBadRequest, TypeInvalidRequest, "Invalid max tokens."},
	"invalid_input":                   {http.StatusBadRequest, TypeInvalidRequest, "Invalid input."},
	"invalid_system":                  {http.StatusBadRequest, TypeInvalidRequest, "Invalid system prompt."},
	"invalid_text":                    {http.StatusBadRequest, TypeInvalidRequest, "Invalid text."},
	"invalid_tools":                   {http.StatusBadRequest, TypeInvalidRequest, "Invalid tools."},
	"invalid_tool_choice":             {http.StatusBadRequest, TypeInvalidRequest, "Invalid tool_choice."},
	"unsupported_tool":                {http.StatusBadRequest, TypeInvalidRequest, "Unsupported tool."},
	"unsupported_input_item":          {http.StatusBadRequest, TypeInvalidRequest, "Unsupported input item."},
	"background_not_supported":        {http.StatusBadRequest, TypeInvalidRequest, "background is not supported."},
	"conversation_not_supported":      {http.StatusBadRequest, TypeInvalidRequest, "conversation is not supported."},
	"item_reference_not_supported":    {http.StatusBadRequest, TypeInvalidRequest, "Item references are not supported."},
	"previous_response_not_supported": {http.StatusBadRequest, TypeInvalidRequest, "previous_response_id is not supported."},
	"prompt_not_supported":            {http.StatusBadRequest, TypeInvalidRequest, "prompt is not supported."},
	"invalid_project":                 {http.StatusBadRequest, TypeInvalidRequest, "Invalid project id."},
	"invalid_checkpoint":              {http.StatusBadRequest, TypeInvalidRequest, "Invalid checkpoint record."},
	"invalid_ref":                     {http.StatusBadRequest, TypeInvalidRequest, "Invalid ref."},
	"invalid_sha":                     {http.StatusBadRequest, TypeInvalidRequest, "Invalid commit id."},
	"invalid_tag":                     {http.StatusBadRequest, TypeInvalidRequest, "Invalid tag."},
	"invalid_subdomain":               {http.StatusBadRequest, TypeInvalidRequest, "Invalid subdomain."},
	"invalid_service":                 {http.StatusBadRequest, TypeInvalidRequest, "Invalid git service."},
	"invalid_owner_epoch":             {http.StatusBadRequest, TypeInvalidRequest, "Invalid owner epoch."},
	"invalid_outbox_message":          {http.StatusBadRequest, TypeInvalidRequest, "Invalid outbox message."},
	"invalid_webhook_attempt":         {http.StatusBadRequest, TypeInvalidRequest, "Invalid webhook attempt."},
	"invalid_replay_range":            {http.StatusBadRequest, TypeInvalidRequest, "Invalid replay range."},
	"invalid_key":                     {http.StatusBadRequest, TypeInvalidRequest, "Invalid object key."},
	"unknown_endpoint":                {http.StatusBadRequest, TypeInvalidRequest, "Unknown endpoint."},
	"method_not_allowed":              {http.StatusMethodNotAllowed, TypeInvalidRequest, "Method not allowed."},
	"fenced":                          {http.StatusConflict, TypeInvalidRequest, "Another pod owns the project."},
	"tag_exists":                      {http.StatusConflict, TypeInvalidRequest, "The tag exists."},
	"pod_claimed":                     {http.StatusConflict, TypeInvalidRequest, "The pod already serves another project."},
	"turn_in_progress":                {http.StatusConflict, TypeInvalidRequest, "A turn is running; retry after it ends."},
	"unsupported_hash_algo":           {http.StatusConflict, TypeInvalidRequest, "Only sha256 is supported."},
	"message_not_replayable":          {http.StatusConflict, TypeInvalidRequest, "The message cannot be replayed."},
	"no_callback_url":                 {http.StatusConflict, TypeInvalidRequest, "The message has no callback URL."},
	"replay_in_progress":              {http.StatusConflict, TypeInvalidRequest, "A replay of this channel is running; retry after it ends."},
	"request_too_large":               {http.StatusRequestEntityTooLarge, TypeInvalidRequest, "Request body too large."},
	"too_many_objects":                {http.StatusRequestEntityTooLarge, TypeInvalidRequest, "Too many objects in one batch request."},
	"request_entity_too_large":        {http.StatusRequestEntityTooLarge, TypeInvalidRequest, "Request body too large."},
	"unsupported_media_type":          {http.StatusUnsupportedMediaType, TypeInvalidRequest, "Unsupported Content-Type."},
	"invalid_content_encoding":        {http.StatusUnsupportedMediaType, TypeInvalidRequest, "Unsupported Content-Encoding."},
	"invalid_object":                  {http.StatusUnprocessableEntity, TypeInvalidRequest, "Invalid object."},
	"invalid_operation":               {http.StatusUnprocessableEntity, TypeInvalidRequest, "The batch operation must be upload or download."},
	"unsupported_transfer":            {http.StatusUnprocessableEntity, TypeInvalidRequest, "Only the basic transfer adapter is supported."},
	"no_objects":                      {http.StatusUnprocessableEntity, TypeInvalidRequest, "The batch request names no objects."},
	"invalid_oid":                     {http.StatusUnprocessableEntity, TypeInvalidRequest, "oid must be a sha256 in lowercase hex."},
	"size_mismatch":                   {http.StatusUnprocessableEntity, TypeInvalidRequest, "Size mismatch."},
	"hash_mismatch":                   {http.StatusUnprocessableEntity, TypeInvalidRequest, "Hash mismatch."},
	"upload_rejected":                 {http.StatusUnprocessableEntity, TypeInvalidRequest, "Upload rejected."},
	"client_closed_request":           {499, TypeInvalidRequest, "The client closed the request."},
	// upstream_rejected is the provider's own 4xx, relayed with its status
	// (Relayed); 400 when built with Coded.
	"upstream_rejected": {http.StatusBadRequest, TypeInvalidRequest, "The model provider rejected the request."},

	// Server side (5xx, server_error): details are logged, not sent.
	"internal_error":             {http.StatusInternalServerError, TypeServer, "Internal server error."},
	"invalid_callback_headers":   {http.StatusInternalServerError, TypeServer, "The channel's callback headers are invalid."},
	"stop_failed":                {http.StatusInternalServerError, TypeServer, "Stopping the guest failed."},
	"upstream_error":             {http.StatusBadGateway, TypeServer, "The model provider failed."},
	"upstream_unavailable":       {http.StatusBadGateway, TypeServer, "The model provider is unavailable."},
	"publish_failed":             {http.StatusBadGateway, TypeServer, "Publishing failed."},
	"restore_failed":             {http.StatusBadGateway, TypeServer, "Restoring failed."},
	"repository_corrupt":         {http.StatusBadGateway, TypeServer, "The stored repository is corrupt."},
	"agent_unreachable":          {http.StatusBadGateway, TypeServer, "The project's agent could not be reached."},
	"export_failed":              {http.StatusBadGateway, TypeServer, "Exporting the guest's disk failed."},
	"storage_unavailable":        {http.StatusBadGateway, TypeServer, "Object storage is unavailable."},
	"callback_forward_failed":    {http.StatusBadGateway, TypeServer, "The callback could not be delivered from the host."},
	"upstream_timeout":           {http.StatusGatewayTimeout, TypeServer, "The model provider did not answer in time."},
	"agent_timeout":              {http.StatusGatewayTimeout, TypeServer, "The agent did not answer in time."},
	"reply_timeout":              {http.StatusGatewayTimeout, TypeServer, "The agent did not reply in time."},
	"upstream_cooling_down":      {http.StatusServiceUnavailable, TypeServer, "Every model deployment is cooling down; retry later."},
	"agent_unavailable":          {http.StatusServiceUnavailable, TypeServer, "The project's agent is unavailable."},
	"agent_start_failed":         {http.StatusServiceUnavailable, TypeServer, "The project's agent could not be started."},
	"instance_offline":           {http.StatusServiceUnavailable, TypeServer, "The paired machine is offline."},
	"runtime_auth_unconfigured":  {http.StatusServiceUnavailable, TypeServer, "Runtime tokens are not configured."},
	"service_unavailable":        {http.StatusServiceUnavailable, TypeServer, "The service is temporarily unavailable; retry shortly."},
	"database_unavailable":       {http.StatusServiceUnavailable, TypeServer, "Database is not reachable."},
	"object_storage_unavailable": {http.StatusServiceUnavailable, TypeServer, "Object storage is unavailable."},
	"durable_write_failed":       {http.StatusServiceUnavailable, TypeServer, "The write could not be made durable."},
	"not_ready":                  {http.StatusServiceUnavailable, TypeServer, "Not ready."},
	"shutting_down":              {http.StatusServiceUnavailable, TypeServer, "Shutting down."},
	"not_persisted":              {http.StatusServiceUnavailable, TypeServer, "The commit is not persisted yet."},
	"flush_timeout":              {http.StatusServiceUnavailable, TypeServer, "The flush did not finish in time."},
	"agent_not_ready":            {http.StatusServiceUnavailable, TypeServer, "The agent is not ready."},
	"channel_config_unavailable": {http.StatusServiceUnavailable, TypeServer, "The channel's configuration is unavailable."},
	"journal_unavailable":        {http.StatusServiceUnavailable, TypeServer, "The message journal is unavailable."},
	"insufficient_storage":       {http.StatusInsufficientStorage, TypeServer, "No space left on disk."},

	// A failed agent turn (the agent loop's codes), answered 502 by the
	// pod's webhook route with the agent's plain-words reply.
	"agent_error":            {http.StatusBadGateway, TypeServer, "The agent failed."},
	"gateway_unreachable":    {http.StatusBadGateway, TypeServer, "The model gateway could not be reached."},
	"gateway_error":          {http.StatusBadGateway, TypeServer, "The model gateway answered an error."},
	"invalid_model_response": {http.StatusBadGateway, TypeServer, "The model answered something that is not a chat completion."},
	"max_iterations":         {http.StatusBadGateway, TypeServer, "The agent stopped without a final answer."},
	"commit_failed":          {http.StatusBadGateway, TypeServer, "The agent's changes could not be committed."},
	"turn_timeout":           {http.StatusBadGateway, TypeServer, "The turn took longer than allowed."},
	"canceled":               {http.StatusBadGateway, TypeServer, "The turn was canceled."},
}

// Statuses is the code → status view of Codes.
var Statuses = func() map[string]int {
	m := make(map[string]int, len(Codes))
	for c, s := range Codes {
		m[c] = s.Status
	}
	return m
}()

// Coded is the error of a declared code: status and type from Codes, msg
// (the code's default message when empty). An undeclared code is a 500
// internal_error naming it (codecheck keeps that from shipping).
func Coded(code, msg string) *Error {
	s, ok := Codes[code]
	if !ok {
		s = Codes["internal_error"]
		return &Error{Status: s.Status, Type: s.Type, Code: "internal_error", Message: s.Message,
			Cause: &undeclaredError{code: code, msg: msg}}
	}
	if msg == "" {
		msg = s.Message
	}
	return &Error{Status: s.Status, Type: s.Type, Code: code, Message: msg}
}

// Relayed passes on an answer this binary received rather than raised:
// the model provider's 4xx, a pod's error envelope seen by the API, or a
// framework's (echo's) status. status is the one received — never a
// constant (codecheck refuses one); an empty d.Type is the status's type.
func Relayed(status int, d ErrorDetail) *Error {
	typ := d.Type
	if typ == "" {
		if s, ok := Codes[d.Code]; ok && s.Status == status {
			typ = s.Type
		} else {
			typ = TypeFor(status)
		}
	}
	return &Error{Status: status, Type: typ, Code: d.Code, Message: d.Message}
}

type undeclaredError struct{ code, msg string }

func (e *undeclaredError) Error() string {
	return "undeclared error code " + e.code + " (add it to wire.Codes): " + e.msg
}
