package admission

import "runtime"

func runtimeGosched() { runtime.Gosched() }
