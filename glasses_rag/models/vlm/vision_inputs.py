"""What a vision-language model is given, the same at training and at inference: its processor, loaded one way, and
the photo, prepared one way.

- `load_processor(folder)`: AutoProcessor; where the processor's video half needs torchvision (Qwen2-VL and
  Qwen2.5-VL in transformers 4.5x) and torchvision cannot be imported, the same processor class built from its image
  processor, tokenizer and chat template with a video half that takes no video (the agent sends photos only).
  `save_processor` then keeps the model folder's own video configuration in what it writes.
- `model_photo(image, max_side)`: the JPEG bytes a model is sent for a photo (RGB, longest side <= max_side, quality
  90): `image_to_data_url` sends exactly these bytes, and `glasses_rag.training.export` writes exactly these bytes as
  the training example's image, so a dynamic-resolution model sees the same pixels, hence the same number of image
  tokens, at training and at test time. `photo_from_bytes` decodes them (both sides).
- `refuses_system_with_images(processor)`: a chat template that refuses a system message beside an image
  (Llama 3.2 Vision's raises "Prompting with images is incompatible with system messages.") gets the system text at
  the start of the first user turn (`glasses_rag.models.vlm.base.system_into_user`), at training and at inference
  alike.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VIDEO_CONFIG = "video_preprocessor_config.json"
JPEG_QUALITY = 90


# ---- the photo ------------------------------------------------------------------------------------------------------


def model_photo(image: Any, max_side: int = 1024, quality: int = JPEG_QUALITY) -> bytes:
    """The JPEG bytes of `image` (a PIL image, a path or raw bytes) as every model is sent it: RGB (or L), longest
    side at most `max_side` (0: as it is), JPEG at `quality`.

    Example:
        model_photo(Image.new("RGB", (2048, 1024)), 1024)[:3] == b"\\xff\\xd8\\xff"
    """
    from PIL import Image

    if isinstance(image, (str, Path)):
        image = Image.open(image)
    elif isinstance(image, (bytes, bytearray)):
        image = Image.open(io.BytesIO(image))
    img = image if image.mode in ("RGB", "L") else image.convert("RGB")
    w, h = img.size
    if max_side and max(w, h) > max_side:
        s = max_side / float(max(w, h))
        img = img.resize((max(1, round(w * s)), max(1, round(h * s))))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def photo_from_bytes(data: bytes) -> Any:
    """The RGB image a model's processor gets from `model_photo`'s bytes (in-process inference and training)."""
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


# ---- the processor --------------------------------------------------------------------------------------------------


def _accepting_photos_only(processor_class: Any) -> Any:
    """`processor_class` (same name, same behaviour) that takes a video half which holds no video processing: the
    class check of transformers 4.57 would refuse it (the real base class is a placeholder without torchvision)."""
    from transformers.video_processing_utils import BaseVideoProcessor

    def check(self: Any, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor" and isinstance(argument, BaseVideoProcessor):
            return type(argument)
        return processor_class.check_argument_for_proper_class(self, argument_name, argument)

    return type(processor_class.__name__, (processor_class,), {"check_argument_for_proper_class": check})


def photos_only_processor(processor_class: Any, image_processor: Any, tokenizer: Any, chat_template: str | None):
    """An instance of `processor_class` whose video half takes no video (`BaseVideoProcessor`)."""
    from transformers.video_processing_utils import BaseVideoProcessor

    lenient = _accepting_photos_only(processor_class)
    return lenient(image_processor, tokenizer, BaseVideoProcessor(), chat_template=chat_template)


def folder_chat_template(folder: Path) -> str | None:
    """The processor's chat template saved in `folder` (chat_template.jinja, or chat_template.json's)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    legacy = folder / "chat_template.json"
    if legacy.is_file():
        value = json.loads(legacy.read_text(encoding="utf-8")).get("chat_template")
        return value if isinstance(value, str) else None
    return None


def load_processor(folder: str | Path, **kw: Any) -> Any:
    """The processor of the model in `folder` (local files only; `kw` go to from_pretrained)."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(folder, **kw)
    except ImportError as e:
        if "torchvision" not in str(e).lower() or not (Path(folder) / VIDEO_CONFIG).is_file():
            raise
        log.info("%s: the processor's video half needs torchvision; loading it for photos only", folder)
        return _photos_only_from(Path(folder), kw)


def _photos_only_from(folder: Path, kw: dict[str, Any]) -> Any:
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type", "")
    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    if not name:
        raise ImportError(f"{folder}: its processor needs torchvision and no processor class is known for {model_type}")
    image_kw = {k: v for k, v in kw.items() if k != "fix_mistral_regex"}
    images = AutoImageProcessor.from_pretrained(folder, use_fast=False, **image_kw)
    tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
    return photos_only_processor(getattr(transformers, name), images, tokenizer, folder_chat_template(folder))


def is_photos_only(processor: Any) -> bool:
    from transformers.video_processing_utils import BaseVideoProcessor

    return type(getattr(processor, "video_processor", None)) is BaseVideoProcessor


def save_processor(processor: Any, out: str | Path, base_folder: str | Path | None = None) -> None:
    """`processor.save_pretrained(out)`; a photos-only processor keeps the base folder's video configuration (so
    that a machine with torchvision loads the model's real video processor from `out`)."""
    processor.save_pretrained(str(out))
    source = Path(base_folder) / VIDEO_CONFIG if base_folder else None
    if is_photos_only(processor) and source is not None and source.is_file():
        shutil.copyfile(source, Path(out) / VIDEO_CONFIG)


# ---- messages -------------------------------------------------------------------------------------------------------

_PROBE = [
    {"role": "system", "content": [{"type": "text", "text": "s"}]},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]},
]


def refuses_system_with_images(processor: Any, chat_template: str | None = None) -> bool:
    """Whether the chat template raises on a system message beside an image (Llama 3.2 Vision's does)."""
    try:
        processor.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True, chat_template=chat_template)
    except Exception as e:  # noqa: BLE001 - jinja's TemplateError, or a template error of the model's own kind
        return "system" in str(e).lower()
    return False


__all__ = [
    "is_photos_only",
    "load_processor",
    "model_photo",
    "photo_from_bytes",
    "photos_only_processor",
    "refuses_system_with_images",
    "save_processor",
]
