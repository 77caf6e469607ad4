"""The cubins the lab writes to its cache are whole (attnlab.compile.whole_cubin).

CuPy's ``nvrtc.getCUBIN`` returns the image without its last byte (it strips a trailing NUL as if the
binary were PTX text); every cubin of the H200 runs' cache (.devcache) was one byte shorter than its
ELF header says. The driver loaded them, as the missing byte is the high byte of the last program
header's alignment, but a disassembler (nvdisasm) refuses such a file. whole_cubin restores that one
byte and refuses anything else.
"""

import struct
import subprocess

import pytest

from attnlab.compile import CompileError, elf_extent, whole_cubin
from attnlab.static import nvcc_path


def synthetic_elf(payload: bytes = b"\x01\x02\x03\x04" * 5) -> bytes:
    """An ELF64 image laid out as NVRTC's cubins are: header, section data, section headers, and the
    program header table last."""
    shoff = 64 + len(payload)
    shnum = 2   # the null section and one PROGBITS section holding the payload
    phoff = shoff + 64 * shnum
    phnum = 2
    header = bytearray(64)
    header[:8] = b"\x7fELF\x02\x01\x01\x41"
    struct.pack_into("<HHIQQQIHHHHHH", header, 16, 2, 190, 1, 0, phoff, shoff, 0, 64, 56, phnum, 64, shnum, 0)
    sections = bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 1, 6, 0, 64, len(payload), 0, 0, 16, 0)
    phdrs = b"".join(struct.pack("<IIQQQQQQ", 1, 5, 64, 0, 0, len(payload), len(payload), 8) for _ in range(phnum))
    return bytes(header) + payload + sections + phdrs


def test_extent_of_a_whole_image_is_its_length():
    img = synthetic_elf()
    assert elf_extent(img) == len(img)
    assert whole_cubin(img) == img


def test_the_byte_cupy_drops_is_put_back():
    img = synthetic_elf()
    assert img[-1] == 0   # the high byte of the last program header's p_align
    assert elf_extent(img[:-1]) == len(img)
    assert whole_cubin(img[:-1]) == img


@pytest.mark.parametrize("cut", [2, 9, 56])
def test_an_image_short_by_more_is_refused(cut):
    with pytest.raises(CompileError, match=f"{cut} bytes shorter"):
        whole_cubin(synthetic_elf()[:-cut])


def test_an_image_that_does_not_end_with_its_program_headers_is_not_padded():
    img = synthetic_elf()
    # the section data moved to the end: a missing last byte there is not known to be zero
    shoff, phoff = 64 + 20, 64 + 20 + 128
    moved = bytearray(img)
    struct.pack_into("<Q", moved, shoff + 64 + 0x18, len(img))   # section 1's sh_offset: past everything
    moved += b"\x05" * 20
    assert elf_extent(bytes(moved)) == len(moved) and phoff + 112 < len(moved)
    with pytest.raises(CompileError, match="1 byte shorter"):
        whole_cubin(bytes(moved[:-1]))


def test_not_an_elf_image():
    with pytest.raises(CompileError, match="not an ELF64"):
        whole_cubin(b"// PTX text\n.version 8.0\n" + bytes(64))


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is needed to build a real cubin")
def test_a_real_cubin_ends_with_its_program_headers(tmp_path):
    """The premise of the padding, on a cubin nvcc builds for the H200: its ELF header accounts for
    every byte, and its last byte is zero."""
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n')
    res = subprocess.run([nvcc_path(), "-arch=sm_90a", "-cubin", "-o", str(tmp_path / "k.cubin"), str(src)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    img = (tmp_path / "k.cubin").read_bytes()
    phoff = int.from_bytes(img[0x20:0x28], "little")
    phnum = int.from_bytes(img[0x38:0x3A], "little")
    assert elf_extent(img) == len(img) == phoff + 56 * phnum
    assert img[-1] == 0
    assert whole_cubin(img[:-1]) == img
