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

// OpenAIErrorType is the error type OpenAI uses for an HTTP status.
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

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

// AnthropicErrorType is the error type Anthropic uses for an HTTP status.
func AnthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529, http.StatusServiceUnavailable:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

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
