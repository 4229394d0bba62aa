from dlsched.sim.measured_speeds import measured_gpu_speeds


def test_h100_factors_come_from_the_measurements_where_they_exist(data_dir):
    speeds, measured = measured_gpu_speeds("h100")
    assert measured == ("cifar10", "imagenet")
    assert set(speeds) == {f"h100/{a}" for a in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")}
    assert all(v > 1 for v in speeds.values())                  # an H100 outruns the traced T4
    assert speeds["h100/cifar10"] != speeds["h100/imagenet"]     # per-model, not one constant
    fallback = (speeds["h100/cifar10"] * speeds["h100/imagenet"]) ** 0.5
    assert abs(speeds["h100/ncf"] - fallback) < 1e-9
