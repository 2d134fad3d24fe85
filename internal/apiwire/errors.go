package apiwire

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// OpenAIError is the error body of the OpenAI APIs (chat completions,
// completions, Responses, models) and vLLM:
// {"error":{"message","type","param","code"}}.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail is an OpenAIError's error. Code is a string for
// OpenAI ("model_not_found") and the HTTP status as a number for vLLM, so
// it is decoded as either (string or float64) and written as given; Param
// is null unless a request field is named.
type OpenAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// NewOpenAIError returns the error body for HTTP status with message:
// Type from OpenAIErrorType, Code the status (as vLLM writes it).
func NewOpenAIError(status int, message string) OpenAIError {
	return OpenAIError{Error: OpenAIErrorDetail{Message: message, Type: OpenAIErrorType(status), Code: status}}
}

// ErrorTypes are the error types of one HTTP status in the two API
// families.
type ErrorTypes struct {
	Status    int
	OpenAI    string
	Anthropic string
}

// errorTypes is the one table of error types by HTTP status, for every
// server in the module that answers in the OpenAI or Anthropic shape (the
// gateway, the mock worker). Anthropic's types are its documented ones
// (docs.claude.com/en/api/errors: 400 invalid_request_error, 401
// authentication_error, 402 billing_error, 403 permission_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 500
// api_error, 504 timeout_error, 529 overloaded_error); 503, which it does
// not list, is overloaded_error, its "temporarily unavailable". OpenAI's
// are those its API and SDKs name by status (invalid_request_error,
// authentication_error, permission_error for the SDK's
// PermissionDeniedError, not_found_error, rate_limit_error, server_error
// for every 5xx: OpenAI has no service_unavailable type).
var errorTypes = [...]ErrorTypes{
	{http.StatusBadRequest, "invalid_request_error", "invalid_request_error"},
	{http.StatusUnauthorized, "authentication_error", "authentication_error"},
	{http.StatusPaymentRequired, "invalid_request_error", "billing_error"},
	{http.StatusForbidden, "permission_error", "permission_error"},
	{http.StatusNotFound, "not_found_error", "not_found_error"},
	{http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"},
	{http.StatusTooManyRequests, "rate_limit_error", "rate_limit_error"},
	{http.StatusInternalServerError, "server_error", "api_error"},
	{http.StatusServiceUnavailable, "server_error", "overloaded_error"},
	{http.StatusGatewayTimeout, "server_error", "timeout_error"},
	{529, "server_error", "overloaded_error"},
}

// ErrorTypesFor returns the error types of an HTTP status: the table's
// row, else invalid_request_error for other 4xx (and anything below 500)
// and server_error / api_error for other 5xx.
func ErrorTypesFor(status int) ErrorTypes {
	for _, t := range errorTypes {
		if t.Status == status {
			return t
		}
	}
	if status >= 500 {
		return ErrorTypes{status, "server_error", "api_error"}
	}
	return ErrorTypes{status, "invalid_request_error", "invalid_request_error"}
}

// OpenAIErrorType is the error type OpenAI uses for an HTTP status
// (ErrorTypesFor).
func OpenAIErrorType(status int) string { return ErrorTypesFor(status).OpenAI }

// AnthropicError is the error body of the Anthropic API, also sent as a
// stream's error event: {"type":"error","error":{"type","message"}}.
type AnthropicError struct {
	Type  string               `json:"type"` // "error"
	Error AnthropicErrorDetail `json:"error"`
}

// AnthropicErrorDetail is an AnthropicError's error.
type AnthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// NewAnthropicError returns the error body for HTTP status with message.
func NewAnthropicError(status int, message string) AnthropicError {
	return AnthropicError{Type: "error", Error: AnthropicErrorDetail{Type: AnthropicErrorType(status), Message: message}}
}

// AnthropicErrorType is the error type Anthropic uses for an HTTP status
// (ErrorTypesFor).
func AnthropicErrorType(status int) string { return ErrorTypesFor(status).Anthropic }

// WriteJSON writes v as a JSON reply with status.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

// WriteOpenAIError writes NewOpenAIError(status, message).
func WriteOpenAIError(w http.ResponseWriter, status int, message string) error {
	return WriteJSON(w, status, NewOpenAIError(status, message))
}

// WriteAnthropicError writes NewAnthropicError(status, message).
func WriteAnthropicError(w http.ResponseWriter, status int, message string) error {
	return WriteJSON(w, status, NewAnthropicError(status, message))
}
