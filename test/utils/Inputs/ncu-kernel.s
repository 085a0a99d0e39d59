# A stand-in for a megakernel cubin (ncu-sass.test): the kernel's section
# with its symbol over the whole of it and two device functions inside,
# and a function of another section at the same offset as the kernel.
	.section .text.amk_megakernel,"ax",@progbits
	.globl amk_megakernel
	.type amk_megakernel, @function
amk_megakernel:
	.fill 16, 1, 0x90
	.type "$amk_megakernel$_Z6amk_v0RK13amk_program_t", @function
"$amk_megakernel$_Z6amk_v0RK13amk_program_t":
	.fill 32, 1, 0x90
	.size "$amk_megakernel$_Z6amk_v0RK13amk_program_t", 32
	.fill 16, 1, 0x90
	.type "$amk_megakernel$_Z8amk_waitRK13amk_program_t", @function
"$amk_megakernel$_Z8amk_waitRK13amk_program_t":
	.fill 32, 1, 0x90
	.size "$amk_megakernel$_Z8amk_waitRK13amk_program_t", 32
	.size amk_megakernel, 96
	.text
	.type other, @function
other:
	.fill 16, 1, 0x90
	.size other, 16
