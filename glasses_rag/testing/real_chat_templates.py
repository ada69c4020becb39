"""The chat templates that ship with three vision-language models, for the tiny models of
glasses_rag/testing/tiny_vlms.py (no hub access here, so they are written out; each as the model's folder has it,
whitespace included, so that a tiny model renders exactly what the real one does).

- QWEN2_5_VL: `chat_template.json` of Qwen/Qwen2.5-VL-7B-Instruct (the same in the 3B and 72B folders), the
  processor's template: an image part becomes `<|vision_start|><|image_pad|><|vision_end|>`, which the processor
  expands to one `<|image_pad|>` per merged patch.
- GEMMA3: `chat_template.json` of google/gemma-3-4b-it (the same in 12b-it and 27b-it): no system role (its text
  opens the first user turn), `| trim` on string parts, an image part becomes `<start_of_image>`, which the processor
  expands to `<start_of_image>` + 256 `<image_soft_token>` + `<end_of_image>`.
- LLAMA3_2_VISION: `chat_template.json` of meta-llama/Llama-3.2-11B-Vision-Instruct: a system message and an image
  together raise "Prompting with images is incompatible with system messages."; an image part becomes `<|image|>`
  (the vision features enter through cross-attention, not as tokens).
"""

from __future__ import annotations

QWEN2_5_VL = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

LLAMA3_2_VISION = (
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n'
    '        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}\n'
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    '    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = "" %}\n{%- endif %}\n\n'
    "{#- Find out if there are any images #}\n{% set image_ns = namespace(has_images=false) %}      \n"
    "{%- for message in messages %}\n    {%- for content in message['content'] %}\n"
    "        {%- if content['type'] == 'image' %}\n            {%- set image_ns.has_images = true %}\n"
    "        {%- endif %}\n    {%- endfor %}\n{%- endfor %}\n\n"
    "{#- Error out if there are images and system message #}\n"
    '{%- if image_ns.has_images and not system_message == "" %}\n'
    '    {{- raise_exception("Prompting with images is incompatible with system messages.") }}\n{%- endif %}\n\n'
    "{#- System message if there are no images #}\n{%- if not image_ns.has_images %}\n"
    '    {{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n    {%- if tools is not none %}\n'
    '        {{- "Environment: ipython\\n" }}\n    {%- endif %}\n'
    '    {{- "Cutting Knowledge Date: December 2023\\n" }}\n'
    '    {{- "Today Date: " + date_string + "\\n\\n" }}\n'
    "    {%- if tools is not none and not tools_in_user_message %}\n"
    '        {{- "You have access to the following functions. To call a function, please respond with JSON for a '
    'function call." }}\n'
    '        {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
    "value}.' }}\n"
    '        {{- "Do not use variables.\\n\\n" }}\n        {%- for t in tools %}\n'
    '            {{- t | tojson(indent=4) }}\n            {{- "\\n\\n" }}\n        {%- endfor %}\n    {%- endif %}\n'
    '    {{- system_message }}\n    {{- "<|eot_id|>" }}\n{%- endif %}\n\n'
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user "
    'message!") }}\n'
    "{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
    '    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
    '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
    "value}.' }}\n"
    '    {{- "Do not use variables.\\n\\n" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n'
    '        {{- "\\n\\n" }}\n    {%- endfor %}\n    {{- first_user_message + "<|eot_id|>"}}\n{%- endif %}\n\n'
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
    "        {%- if message['content'] is string %}\n            {{- message['content'] }}\n        {%- else %}\n"
    "            {%- for content in message['content'] %}\n                {%- if content['type'] == 'image' %}\n"
    "                    {{- '<|image|>' }}\n                {%- elif content['type'] == 'text' %}\n"
    "                    {{- content['text'] }}\n                {%- endif %}\n            {%- endfor %}\n"
    "        {%- endif %}\n        {{- '<|eot_id|>' }}\n    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    '            {{- raise_exception("This model only supports single tool-calls at once!") }}\n'
    "        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n        {{- '\"parameters\": ' }}\n"
    '        {{- tool_call.arguments | tojson }}\n        {{- "}" }}\n        {{- "<|eot_id|>" }}\n'
    '    {%- elif message.role == "tool" or message.role == "ipython" %}\n'
    '        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n'
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n"
    '        {%- endif %}\n        {{- "<|eot_id|>" }}\n    {%- endif %}\n{%- endfor %}\n'
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"
)

__all__ = ["GEMMA3", "LLAMA3_2_VISION", "QWEN2_5_VL"]
