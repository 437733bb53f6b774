package lua

// loom: runtime errors that name the variable, field, upvalue or method
// they are about, as Lua 5.1 does ("attempt to call global 'x' (a nil
// value)", "attempt to index field 'test' (a nil value)"): a port of
// ldebug.c's getobjname and symbexec to gopher-lua's opcodes (which add
// MOVEN, GETTABLEKS and SETTABLEKS to 5.1's). Only the raise sites call
// these functions, so code that raises nothing runs exactly as before.

// loomCurrentPC is the index of the instruction the Lua frame cf runs
// (its Pc already points past it), or -1 for a Go frame.
func loomCurrentPC(cf *callFrame) int {
	if cf == nil || cf.Fn == nil || cf.Fn.IsG || cf.Fn.Proto == nil || cf.Pc <= 0 {
		return -1
	}
	return cf.Pc - 1
}

// loomLocalName is luaF_getlocalname: the name of the n-th (from 1) local
// active at pc. gopher-lua's EndPc is the last instruction of the scope
// (5.1's is one past it).
func loomLocalName(p *FunctionProto, n, pc int) string {
	for _, l := range p.DbgLocals {
		if l.StartPc > pc {
			break
		}
		if pc <= l.EndPc {
			n--
			if n == 0 {
				return l.Name
			}
		}
	}
	return ""
}

// loomConstName is ldebug.c's kname: the string constant an RK operand
// names, or "?".
func loomConstName(p *FunctionProto, rk int) string {
	if opIsK(rk) {
		if s, ok := p.Constants[opIndexK(rk)].(LString); ok {
			return string(s)
		}
	}
	return "?"
}

// loomObjName is ldebug.c's getobjname: what register reg of the Lua
// frame cf holds at its current instruction, as a kind ("local",
// "global", "field", "upvalue", "method") and a name; kind is "" when no
// name is known.
func loomObjName(cf *callFrame, reg int) (kind, name string) {
	pc := loomCurrentPC(cf)
	if pc < 0 || reg < 0 {
		return "", ""
	}
	p := cf.Fn.Proto
	for depth := 0; depth < 32; depth++ { // MOVE chains; 5.1 recurses
		if n := loomLocalName(p, reg+1, pc); n != "" {
			return "local", n
		}
		i := loomSymbexec(p, pc, reg)
		if i == opInvalidInstruction {
			return "", ""
		}
		switch opGetOpCode(i) {
		case OP_GETGLOBAL:
			if s, ok := p.Constants[opGetArgBx(i)].(LString); ok {
				return "global", string(s)
			}
			return "", ""
		case OP_MOVE, OP_MOVEN:
			a, b := opGetArgA(i), opGetArgB(i)
			if b < a {
				reg = b
				continue
			}
			return "", ""
		case OP_GETTABLE, OP_GETTABLEKS:
			return "field", loomConstName(p, opGetArgC(i))
		case OP_GETUPVAL:
			if u := opGetArgB(i); u < len(p.DbgUpvalues) {
				return "upvalue", p.DbgUpvalues[u]
			}
			return "upvalue", "?"
		case OP_SELF:
			return "method", loomConstName(p, opGetArgC(i))
		}
		return "", ""
	}
	return "", ""
}

// loomSymbexec is the part of ldebug.c's symbexec that getobjname uses:
// the last instruction before lastpc that set register reg, following
// forward jumps that do not skip lastpc, as 5.1 does (the code checks
// are left out: gopher-lua's compiler made the code).
func loomSymbexec(p *FunctionProto, lastpc, reg int) uint32 {
	code := p.Code
	last := -1
	for pc := 0; pc < lastpc && pc < len(code); pc++ {
		i := code[pc]
		op := opGetOpCode(i)
		if op > opCodeMax {
			return opInvalidInstruction
		}
		a := opGetArgA(i)
		if opProps[op].SetRegA && a == reg {
			last = pc
		}
		switch op {
		case OP_LOADNIL:
			if a <= reg && reg <= opGetArgB(i) {
				last = pc
			}
		case OP_SELF:
			if reg == a+1 {
				last = pc
			}
		case OP_TFORLOOP:
			if reg >= a+2 {
				last = pc
			}
		case OP_JMP, OP_FORLOOP, OP_FORPREP:
			if dest := pc + 1 + opGetArgSbx(i); pc < dest && dest <= lastpc {
				pc += opGetArgSbx(i)
			}
		case OP_CALL, OP_TAILCALL:
			if reg >= a {
				last = pc
			}
		case OP_SETLIST:
			if opGetArgC(i) == 0 {
				pc++
			}
		case OP_CLOSURE:
			// The pseudo-instructions that follow carry the upvalues.
			if b := opGetArgBx(i); b < len(p.FunctionPrototypes) {
				pc += int(p.FunctionPrototypes[b].NumUpvalues)
			}
		}
	}
	if last < 0 {
		return opInvalidInstruction
	}
	return code[last]
}

// loomTypeError raises Lua 5.1's luaG_typeerror: "attempt to OP KIND
// 'NAME' (a TYPE value)" when register reg (of the running Lua frame; -1
// for none) has a name, else "attempt to OP a TYPE value".
func (ls *LState) loomTypeError(v LValue, op string, reg int) {
	if kind, name := loomObjName(ls.currentFrame, reg); kind != "" {
		ls.RaiseError("attempt to %s %s '%s' (a %s value)", op, kind, name, v.Type().String())
	}
	ls.RaiseError("attempt to %s a %s value", op, v.Type().String())
}

// loomInstArgs decodes the running Lua frame's instruction: ok is false
// for a Go frame (a binding calling L.GetField or L.Call).
func (ls *LState) loomInstArgs() (op, a, b, c int, ok bool) {
	cf := ls.currentFrame
	pc := loomCurrentPC(cf)
	if pc < 0 || pc >= len(cf.Fn.Proto.Code) {
		return 0, 0, 0, 0, false
	}
	i := cf.Fn.Proto.Code[pc]
	return opGetOpCode(i), opGetArgA(i), opGetArgB(i), opGetArgC(i), true
}

// loomIndexError is the error of indexing v, a value that is not a table
// and has no __index (or __newindex): named after the register the
// indexing instruction reads it from when direct is true (v is that
// register's value, not a value found through __index).
func (ls *LState) loomIndexError(v LValue, direct bool) {
	reg := -1
	if op, a, b, _, ok := ls.loomInstArgs(); ok && direct {
		switch op {
		case OP_GETTABLE, OP_GETTABLEKS, OP_SELF:
			reg = b
		case OP_SETTABLE, OP_SETTABLEKS:
			reg = a
		}
	}
	ls.loomTypeError(v, "index", reg)
}

// loomCallError is the error of calling fn, which is not callable: named
// after the register of the running CALL or TAILCALL when it holds fn (a
// Go function's L.Call of a bad value, as pcall(nil), gets no name).
func (ls *LState) loomCallError(fn LValue) {
	reg := -1
	if op, a, _, _, ok := ls.loomInstArgs(); ok && (op == OP_CALL || op == OP_TAILCALL) {
		if ls.reg.Get(ls.currentFrame.LocalBase+a) == fn {
			reg = a
		}
	}
	ls.loomTypeError(fn, "call", reg)
}

// loomArithError is luaG_aritherror: the operand that is not a number
// (the second when both are not) of the running arithmetic instruction.
func (ls *LState) loomArithError(lhs, rhs LValue) {
	bad := rhs
	lhsNum := false
	switch x := lhs.(type) {
	case LNumber:
		lhsNum = true
	case LString:
		_, err := parseNumber(string(x))
		lhsNum = err == nil
	}
	reg := -1
	op, _, b, c, ok := ls.loomInstArgs()
	if !lhsNum {
		bad = lhs
	}
	if ok {
		switch op {
		case OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_POW:
			rk := c
			if !lhsNum {
				rk = b
			}
			if !opIsK(rk) {
				reg = rk
			}
		case OP_UNM:
			if !opIsK(b) {
				reg = b
			}
		}
	}
	ls.loomTypeError(bad, "perform arithmetic on", reg)
}

// loomOperandError is the type error of an instruction's RK operand rk
// (a register, or a constant that has no name).
func (ls *LState) loomOperandError(v LValue, op string, rk int) {
	if opIsK(rk) {
		rk = -1
	}
	ls.loomTypeError(v, op, rk)
}

// loomConcatError is luaG_concaterror for the operands in registers i
// and i+1 (absolute): the first unless it is a string or a number.
func (ls *LState) loomConcatError(lhs, rhs LValue, i int) {
	bad, at := lhs, i
	switch lhs.(type) {
	case LString, LNumber:
		bad, at = rhs, i+1
	}
	reg := -1
	if op, _, _, _, ok := ls.loomInstArgs(); ok && op == OP_CONCAT {
		reg = at - ls.currentFrame.LocalBase
	}
	ls.loomTypeError(bad, "concatenate", reg)
}

// loomCompareError is luaG_ordererror.
func (ls *LState) loomCompareError(lhs, rhs LValue) {
	t1, t2 := lhs.Type().String(), rhs.Type().String()
	if t1 == t2 {
		ls.RaiseError("attempt to compare two %s values", t1)
	}
	ls.RaiseError("attempt to compare %s with %s", t1, t2)
}
