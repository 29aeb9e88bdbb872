"""hb.torch.op(pipeline, backward=gradient_pipeline): a forward and its gradient pipeline as one
differentiable PyTorch op.

The gradient pipelines follow Halide's HelloPyTorch convention (the forward's inputs by name and
d_<output> in, d_<input> out) and are generated from the forward's own definition with Halide's
propagate_adjoints (tests/pipelines.py), each in a fresh process so that their output names are
exactly d_<input>. Gradients are compared with torch's autograd on the same arithmetic, and with
finite differences (torch.autograd.gradcheck), eager and under torch.compile(fullgraph=True).
"""

import re

import pytest
import torch

import halide_buffer as hb
import halide_buffer.torch as hbt

from pipelines import TARGET, c_compiler, compile_in_fresh_processes, link

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_halide]

STRICT = TARGET + "-strict_float"
INDUCTOR_IMPORT = "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("torch_gradients")
    objects = compile_in_fresh_processes(directory, [
        [("product_func", [False], "hb_tg_product", STRICT), ("valid_blur_func", [False], "hb_tg_blur", STRICT)],
        [("product_func", [True], "hb_tg_product_grad", STRICT), ("valid_blur_func", [True], "hb_tg_blur_grad", STRICT)],
        [("bad_gradient_func", ["no_d_out"], "hb_tg_no_d_out", STRICT)],
        [("bad_gradient_func", ["float32"], "hb_tg_float32", STRICT)],
        [("bad_gradient_func", ["stranger"], "hb_tg_stranger", STRICT)],
    ])
    cc = c_compiler()
    return {stem: hb.aot.load(link(directory, cc, [path], f"lib{stem}.so"), stem) for stem, path in objects.items()}


@pytest.fixture(scope="module")
def product(pipes):
    return hbt.op(pipes["hb_tg_product"], backward=pipes["hb_tg_product_grad"])


@pytest.fixture(scope="module")
def blur(pipes):
    return hbt.op(pipes["hb_tg_blur"], backward=pipes["hb_tg_blur_grad"])


def doubles(shape, seed, grad=True):
    t = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return t.requires_grad_(grad)


def blur_reference(img):
    """valid_blur_func in torch: (img(x - 1, y) + 2 img(x, y) + img(x + 1, y) img(x, y + 1)) / 4 over
    x in [1, w - 1), y in [0, h - 1)."""
    h, w = img.shape
    return (img[:h - 1, 0:w - 2] + 2 * img[:h - 1, 1:w - 1] + img[:h - 1, 2:w] * img[1:h, 1:w - 1]) / 4


def test_the_backward_gives_halides_gradients_and_none_where_it_gives_none(product):
    a, b, c = doubles((5, 7), 1), doubles((5, 7), 2), doubles((5, 7), 3)
    weight = doubles((5, 7), 4, grad=False)
    y = product(a, b, c, 0.5)
    torch.testing.assert_close(y.detach(), a.detach() * b.detach() + c.detach() * 0.5, rtol=0, atol=0)
    (y * weight).sum().backward()
    torch.testing.assert_close(a.grad, weight * b.detach(), rtol=0, atol=0)
    torch.testing.assert_close(b.grad, weight * a.detach(), rtol=0, atol=0)
    assert c.grad is None  # the backward gives no d_c


def test_a_gradient_at_other_coordinates_reaches_the_backward_there(blur):
    """The forward's output lies at mins (0, 1): the backward reads d_blur at those coordinates."""
    img = doubles((6, 9), 5)
    y = blur(img)
    assert y.shape == (5, 7)
    reference = img.detach().clone().requires_grad_()
    expected = blur_reference(reference)
    torch.testing.assert_close(y.detach(), expected.detach(), rtol=1e-15, atol=1e-15)
    weight = doubles((5, 7), 6, grad=False)
    (y * weight).sum().backward()
    (expected * weight).sum().backward()
    torch.testing.assert_close(img.grad, reference.grad, rtol=1e-14, atol=1e-14)


def test_gradcheck_passes(product, blur):
    """c gets no gradient from the backward (by its choice): it is a constant here."""
    a, b, c = doubles((3, 4), 7), doubles((3, 4), 8), doubles((3, 4), 9, grad=False)
    assert torch.autograd.gradcheck(lambda a, b: product(a, b, c, -1.5), (a, b))
    assert torch.autograd.gradcheck(blur, (doubles((4, 5), 10),))


def test_opcheck_passes_with_the_backward(product):
    args = (doubles((3, 4), 11), doubles((3, 4), 12), doubles((3, 4), 13), 2.0)
    result = torch.library.opcheck(product, args)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_compiled_training_step_and_gradcheck(product, blur):
    """torch.compile(fullgraph=True) traces the forward and the backward op (their fake kernels):
    the same loss and gradients as eager, and gradcheck through the compiled function."""
    def loss(a, b, c):
        return (blur(product(a, b, c, 0.25)) ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True)
    eager_inputs = [doubles((6, 8), 20 + i) for i in range(3)]
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    eager_loss, compiled_loss = loss(*eager_inputs), compiled(*compiled_inputs)
    torch.testing.assert_close(compiled_loss, eager_loss)
    eager_loss.backward()
    compiled_loss.backward()
    for e, c in zip(eager_inputs[:2], compiled_inputs[:2]):
        torch.testing.assert_close(c.grad, e.grad)
    assert eager_inputs[2].grad is None and compiled_inputs[2].grad is None
    c = doubles((4, 5), 32, grad=False)
    assert torch.autograd.gradcheck(torch.compile(lambda a, b: blur(product(a, b, c, 0.25)), fullgraph=True),
                                    (doubles((4, 5), 30), doubles((4, 5), 31)))


def test_a_few_steps_of_gradient_descent_lower_the_loss(product):
    """Fit a so that a * b + c * k matches a target: the op trains like any torch op."""
    b, c = doubles((4, 6), 40, grad=False), doubles((4, 6), 41, grad=False)
    target = doubles((4, 6), 42, grad=False)
    a = torch.zeros((4, 6), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([a], lr=0.1)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = ((product(a, b, c, 0.5) - target) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses


def test_without_a_backward_an_input_requiring_grad_is_still_refused(pipes):
    f = hbt.op(pipes["hb_tg_product"], name="hb_tg_product_no_backward")
    a = doubles((2, 3), 50)
    with pytest.raises(RuntimeError, match=re.escape(
            "halide_buffer::hb_tg_product_no_backward(): argument 'a' requires grad, and the op has no backward; "
            "pass a.detach(), or make the op with its gradients' pipeline: hb.torch.op(pipeline, "
            "backward=gradient_pipeline)")):
        f(a, a.detach(), a.detach(), 1.0)


def test_the_backward_op_refuses_a_gradient_unlike_its_output_naming_it(product, blur):
    """The backward op called as torch calls it (the forward's inputs, then d_<output>): a gradient
    of another dtype, axes or shape than its output is refused naming it, nothing computed."""
    backward = torch.ops.halide_buffer.hb_tg_product_backward
    a, b, c = (doubles((3, 4), 60 + i, grad=False) for i in range(3))
    good = backward(a, b, c, 0.5, torch.ones(3, 4, dtype=torch.float64))
    torch.testing.assert_close(good[0], b)
    with pytest.raises(TypeError, match=re.escape(
            "halide_buffer::hb_tg_product_backward(): argument 'd_out' is a torch.float32 tensor where the "
            "pipeline takes torch.float64; pass d_out.to(torch.float64)")):
        backward(a, b, c, 0.5, torch.ones(3, 4))
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_tg_product_backward(): argument 'd_out': 1 axes where the pipeline takes 2")):
        backward(a, b, c, 0.5, torch.ones(12, dtype=torch.float64))
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_tg_product_backward(): the gradient of output 'out' has the shape (4, 3), the "
            "output (3, 4); pass a gradient of the output's shape")):
        backward(a, b, c, 0.5, torch.ones(4, 3, dtype=torch.float64))
    # The same where the output lies at other coordinates (the gradient goes by name, placed).
    img = doubles((6, 9), 64, grad=False)
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_tg_blur_backward(): the gradient of output 'blur' has the shape (6, 9), the "
            "output (5, 7)")):
        torch.ops.halide_buffer.hb_tg_blur_backward(img, torch.ones(6, 9, dtype=torch.float64))


@pytest.mark.parametrize("bad, message", [
    ("hb_tg_no_d_out", "backward hb_tg_no_d_out takes no output's gradient (d_out); pass the pipeline of the "
                       "gradients, taking d_<output> for the outputs of hb_tg_product"),
    ("hb_tg_float32", "backward hb_tg_float32 gives 'd_a' as a float32 buffer of 2 axes, where its input 'a' is a "
                      "float64 buffer of 2 axes; a gradient has its input's dtype and axes"),
    ("hb_tg_stranger", "backward hb_tg_stranger takes 'z', which is neither an input of hb_tg_product (a, b, c, k) "
                       "nor the gradient of one of its outputs (d_out)"),
    ("hb_tg_product", "backward hb_tg_product gives 'out', which names no input buffer of hb_tg_product; name each "
                      "output d_<input> (d_a, d_b, d_c)"),
])
def test_a_backward_breaking_the_convention_is_refused_when_the_op_is_made(pipes, bad, message):
    name = f"hb_tg_refused_{bad}"
    with pytest.raises(ValueError, match=re.escape(f"hb.torch.op(): {message}")):
        hbt.op(pipes["hb_tg_product"], name=name, backward=pipes[bad])
    # Nothing was registered: the name is free for a good backward.
    assert not hasattr(torch.ops.halide_buffer, name)
    good = hbt.op(pipes["hb_tg_product"], name=name, backward=pipes["hb_tg_product_grad"])
    a = doubles((2, 2), 51)
    good(a, a.detach(), a.detach(), 1.0).sum().backward()
    torch.testing.assert_close(a.grad, a.detach())


def test_registering_again_with_another_backward_is_refused(pipes, product):
    assert hbt.op(pipes["hb_tg_product"], backward=pipes["hb_tg_product_grad"]) is product
    with pytest.raises(ValueError, match=r"halide_buffer::hb_tg_product is already the op of hb_tg_product of .* with "
                                         r"the backward hb_tg_product_grad of .*; pass another name"):
        hbt.op(pipes["hb_tg_product"])
    with pytest.raises(TypeError, match=r"backward must be a halide_buffer\.aot\.Pipeline"):
        hbt.op(pipes["hb_tg_product"], name="hb_tg_other", backward="hb_tg_product_grad")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (not available here); tests/gpu/run_checks.sh runs it on one")
@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_gradients_on_cuda_tensors(tmp_path):
    """The forward and its gradient pipeline built for CUDA: the op, its backward and a compiled
    training step on CUDA tensors, on torch's current stream."""
    objects = compile_in_fresh_processes(tmp_path, [
        [("product_func", [False], "hb_tg_product_gpu", STRICT + "-cuda")],
        [("product_func", [True], "hb_tg_product_gpu_grad", STRICT + "-cuda")],
    ])
    cc = c_compiler()
    loaded = {stem: hb.aot.load(link(tmp_path, cc, [path], f"lib{stem}.so"), stem) for stem, path in objects.items()}
    f = hbt.op(loaded["hb_tg_product_gpu"], backward=loaded["hb_tg_product_gpu_grad"])
    a, b, c = (doubles((5, 7), 60 + i).detach().cuda().requires_grad_() for i in range(3))
    weight = doubles((5, 7), 63, grad=False).cuda()

    def loss(a, b, c):
        return (f(a, b, c, 0.5) * weight).sum()

    loss(a, b, c).backward()
    torch.testing.assert_close(a.grad, weight * b.detach(), rtol=0, atol=0)
    torch.testing.assert_close(b.grad, weight * a.detach(), rtol=0, atol=0)
    assert a.grad.device == a.device and c.grad is None
    again = [t.detach().clone().requires_grad_() for t in (a, b)]
    torch.compile(loss, fullgraph=True, backend="aot_eager")(*again, c.detach()).backward()
    torch.testing.assert_close(again[0].grad, a.grad)
    torch.testing.assert_close(again[1].grad, b.grad)
