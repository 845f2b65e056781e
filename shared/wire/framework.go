package wire

import "net/http"

// frameworkCodes are the declared codes of the statuses a web framework
// answers by itself (a route that does not exist, a method it does not
// take, a body over the limit, a content type binding refuses).
var frameworkCodes = map[int]string{
	http.StatusBadRequest:            CodeInvalidRequest,
	http.StatusUnauthorized:          CodeUnauthorized,
	http.StatusForbidden:             CodeForbidden,
	http.StatusNotFound:              CodeNotFound,
	http.StatusMethodNotAllowed:      CodeMethodNotAllowed,
	http.StatusRequestEntityTooLarge: CodeRequestTooLarge,
	http.StatusUnsupportedMediaType:  CodeUnsupportedMediaType,
	http.StatusTooManyRequests:       CodeRateLimited,
}

// Framework is the error of a status the web framework (echo) answered by
// itself, with its message (empty: the code's default): the declared code
// of that status, a 5xx as internal_error with cause logged, and any other
// 4xx relayed with its status as invalid_request. Both binaries' error
// writers (apierr, poderr) map framework errors through it, so a status
// never becomes a code of its own.
func Framework(status int, msg string, cause error) *Error {
	if status >= 500 {
		return Internal(cause)
	}
	if code, ok := frameworkCodes[status]; ok {
		return Coded(code, msg)
	}
	return Relayed(status, ErrorDetail{Code: CodeInvalidRequest, Message: msg})
}
